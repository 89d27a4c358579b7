module github.com/ffcvfs/ffcvfs

go 1.24

require (
	github.com/pixiv/go-libjpeg v0.0.0-20190822045933-3da21a74767d
	github.com/urfave/cli/v2 v2.27.5
	golang.org/x/image v0.30.0
	golang.org/x/term v0.25.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.5 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
	golang.org/x/sys v0.26.0 // indirect
)
