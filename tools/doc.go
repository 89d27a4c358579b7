// Package tools holds the project's Go programs that are tools, not
// products: benchmark-data generators (mkbenchdata, mkimagefolder,
// mkscanbeton), the readers that scripts/bench.sh times (readall,
// storagebench) and the least work a loader of raw images does (rawcopy),
// an image-by-image comparison of the two JPEG entropy decoders
// (entropyab), a simulation of a cluster's caches (clustersim), a member
// of the peer tier that asks a node for many pages at once (peerburst),
// and the reader of a mount's stats.json that bench.sh uses (statsq). Each
// uses the project's packages rather than re-implementing them; scripts/
// keeps the shell and Python that run them.
package tools
