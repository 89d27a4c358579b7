package clihelp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// run runs a small app with args and returns its error's message, its
// exit code and what it printed (help, if any).
func run(t *testing.T, args ...string) (msg string, code int, printed string) {
	t.Helper()
	var out bytes.Buffer
	ran := false
	app := &cli.App{
		Name:   "prog",
		Writer: &out, ErrWriter: &out,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "verbose"}},
		Commands: []*cli.Command{
			{Name: "mount", Flags: []cli.Flag{&cli.StringFlag{Name: "cache-size"}, &cli.StringFlag{Name: "socket", Required: true}},
				Action: func(*cli.Context) error { ran = true; return nil }},
			{Name: "umount", Action: func(*cli.Context) error { return nil }},
			{Name: "cache", Subcommands: []*cli.Command{{Name: "ls", Action: func(*cli.Context) error { return nil }}}},
		},
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
	}
	Apply(app)
	line := append([]string{"prog"}, args...)
	held := commandLine
	commandLine = func() []string { return line }
	defer func() { commandLine = held }()
	err := app.Run(line)
	if ran && err != nil {
		t.Fatalf("%v ran its action and failed: %v", args, err)
	}
	if err == nil {
		return "", 0, out.String()
	}
	code = 1
	if ec, ok := err.(cli.ExitCoder); ok {
		code = ec.ExitCode()
	}
	return err.Error(), code, out.String()
}

// TestOneLine: every mistake is one line naming it, the nearest command
// or flag and where the help is, with exit status 2 and no help printed.
func TestOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--cache", "1GiB", "--socket", "s"}, `mount has no flag "--cache"; did you mean --cache-size? (see prog mount --help)`},
		{[]string{"mount", "-x", "--socket", "s"}, `mount has no flag "-x"`},
		{[]string{"mount"}, `mount needs --socket (see prog mount --help)`},
		{[]string{"mnt"}, `no command "mnt"; did you mean "mount"? (see prog --help)`},
		{[]string{"umnt"}, `no command "umnt"; did you mean "umount"?`},
		{[]string{"--verbos", "mount"}, `no flag "--verbos"; did you mean --verbose? (see prog --help)`},
		{[]string{"cache", "lss"}, `cache has no command "lss"; did you mean "ls"? (see prog cache --help)`},
		{[]string{strings.Repeat("x", 5000)}, `no command "xxxxxxxx`},
		// Printed their help and exited 0.
		{[]string{"--"}, `no command after --; give one of mount, umount or cache (see prog --help)`},
		{[]string{"cache"}, `cache needs one of its commands: ls (see prog cache --help)`},
	} {
		msg, code, printed := run(t, c.args...)
		if code != 2 || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") || printed != "" || len(msg) > 300 {
			t.Errorf("%.40q: exit %d, %q, printed %q; want exit 2, one line with %q", c.args, code, msg, printed, c.want)
		}
	}
	// What is right still runs, and help is still there.
	if msg, code, _ := run(t, "mount", "--cache-size", "1GiB", "--socket", "s"); code != 0 {
		t.Errorf("a right command: exit %d, %s", code, msg)
	}
	if _, code, printed := run(t); code != 0 || !strings.Contains(printed, "mount") {
		t.Errorf("no command: exit %d, %q; want the help", code, printed)
	}
}
