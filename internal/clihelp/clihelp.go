// Package clihelp makes a mistake on the command line one line: what was
// wrong, the nearest command or flag, and where the help is. urfave/cli
// prints a command's whole help on a flag it does not know, on a missing
// required flag and, for an unknown command, says "No help topic"; this
// package sets the hooks urfave/cli offers (OnUsageError, Before, the
// root's Action) so that both programs answer so, with exit status 2.
//
// A flag's suggestion is urfave/cli's own (cli.SuggestFlag: Jaro-Winkler
// over the names); a command's is the one command whose name holds what
// was typed, letters in order ("mnt": mount), else urfave/cli's.
package clihelp

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Apply sets app's hooks, and those of its commands and subcommands.
// Call it once the commands are in place.
func Apply(app *cli.App) {
	app.Suggest = true
	app.OnUsageError = func(c *cli.Context, err error, _ bool) error {
		return cli.Exit(flagLine(app.Name, "", app.Flags, err), 2)
	}
	app.Action = func(c *cli.Context) error {
		if c.NArg() == 0 {
			if slices.Contains(commandLine()[1:], "--") {
				// "--" ends the options: a command must follow.
				return cli.Exit(fmt.Sprintf("no command after --; give one of %s (see %s --help)", names(app.Commands), app.Name), 2)
			}
			return cli.ShowAppHelp(c) // the program alone: its help
		}
		return cli.Exit(unknownCommand(app.Name, "", app.Commands, c.Args().First()), 2)
	}
	for _, cmd := range app.Commands {
		apply(app.Name, "", cmd)
	}
}

// commandLine returns the program's arguments, its name first (tests set
// it).
var commandLine = func() []string { return os.Args }

// unknownCommand is the line for a command that command path of prog
// (path "" for prog itself), whose commands are cmds, does not have.
func unknownCommand(prog, path string, cmds []*cli.Command, name string) string {
	msg := fmt.Sprintf("no command %s", quote(name))
	if path != "" {
		msg = fmt.Sprintf("%s has no command %s", path, quote(name))
	}
	if s := nearestCommand(cmds, name); s != "" {
		msg += fmt.Sprintf("; did you mean %s?", s)
	}
	return msg + fmt.Sprintf(" (see %s --help)", strings.TrimSpace(prog+" "+path))
}

func apply(prog, parent string, cmd *cli.Command) {
	path := strings.TrimSpace(parent + " " + cmd.Name)
	cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
		return cli.Exit(flagLine(prog, path, cmd.Flags, err), 2)
	}
	// A required flag is checked here, before the command runs, instead
	// of by urfave/cli, which prints the whole help beside its error.
	var required []string
	for _, f := range cmd.Flags {
		if rf, ok := f.(cli.RequiredFlag); ok && rf.IsRequired() {
			v := reflect.ValueOf(f)
			if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
				if r := v.Elem().FieldByName("Required"); r.IsValid() && r.CanSet() && r.Kind() == reflect.Bool {
					r.SetBool(false)
					required = append(required, f.Names()[0])
				}
			}
		}
	}
	if len(required) > 0 {
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			for _, name := range required {
				if !c.IsSet(name) {
					return cli.Exit(fmt.Sprintf("%s needs --%s (see %s %s --help)", path, name, prog, path), 2)
				}
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
	}
	if len(cmd.Subcommands) > 0 && cmd.Action == nil {
		cmd.Action = func(c *cli.Context) error {
			if c.NArg() == 0 {
				return cli.Exit(fmt.Sprintf("%s needs one of its commands: %s (see %s %s --help)", path, names(cmd.Subcommands), prog, path), 2)
			}
			return cli.Exit(unknownCommand(prog, path, cmd.Subcommands, c.Args().First()), 2)
		}
	}
	for _, sub := range cmd.Subcommands {
		apply(prog, path, sub)
	}
}

// names lists the commands of cmds that are not hidden, but help: "a, b
// or c".
func names(cmds []*cli.Command) string {
	var ns []string
	for _, c := range cmds {
		if !c.Hidden && c.Name != "help" {
			ns = append(ns, c.Name)
		}
	}
	if len(ns) < 2 {
		return strings.Join(ns, "")
	}
	return strings.Join(ns[:len(ns)-1], ", ") + " or " + ns[len(ns)-1]
}

// flagLine is the line for a flag parse error of command path of prog
// (path "" for prog's own flags).
func flagLine(prog, path string, flags []cli.Flag, err error) string {
	full := strings.TrimSpace(prog + " " + path)
	msg := err.Error()
	const undefined = "flag provided but not defined: -"
	if given, ok := strings.CutPrefix(msg, undefined); ok {
		typed := "-" + given
		if len(given) > 1 && !strings.HasPrefix(given, "-") {
			typed = "--" + given
		}
		msg = fmt.Sprintf("no flag %s", quote(typed))
		if path != "" {
			msg = fmt.Sprintf("%s has no flag %s", path, quote(typed))
		}
		if cli.SuggestFlag != nil {
			if s := cli.SuggestFlag(flags, strings.TrimLeft(given, "-"), false); s != "" && s != "--help" && s != "-h" {
				msg += fmt.Sprintf("; did you mean %s?", s)
			}
		}
	} else if path != "" {
		msg = path + ": " + msg
	}
	return msg + fmt.Sprintf(" (see %s --help)", full)
}

// nearestCommand is the command name nearest name, quoted, or "".
func nearestCommand(cmds []*cli.Command, name string) string {
	var visible []*cli.Command
	var holds []string
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		visible = append(visible, c)
		if inOrder(c.Name, name) {
			holds = append(holds, c.Name)
		}
	}
	if len(holds) > 1 {
		// "mnt" is in mount and umount: the one that starts alike.
		var first []string
		for _, h := range holds {
			if h[0] == name[0] {
				first = append(first, h)
			}
		}
		holds = first
	}
	if len(holds) == 1 {
		return quote(holds[0])
	}
	if cli.SuggestCommand == nil || len(visible) == 0 {
		return ""
	}
	s := cli.SuggestCommand(visible, name)
	// cli.SuggestCommand answers with its template, "Did you mean %q?".
	if i, j := strings.IndexByte(s, '"'), strings.LastIndexByte(s, '"'); i >= 0 && j > i {
		s = s[i+1 : j]
	}
	if s == "" || s == "help" || s == "h" {
		return ""
	}
	return quote(s)
}

// inOrder reports whether name holds the letters of typed in their
// order ("mnt" in "mount"), typed at least two letters long.
func inOrder(name, typed string) bool {
	if len(typed) < 2 {
		return false
	}
	i := 0
	for j := 0; j < len(name) && i < len(typed); j++ {
		if name[j] == typed[i] {
			i++
		}
	}
	return i == len(typed)
}

// quote puts a name given on the command line in quotes, its length
// bounded: what was typed may be anything.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}
