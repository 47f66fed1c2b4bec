// Package cli holds what the controller's subcommands share on the command line.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	flag "github.com/spf13/pflag"
)

// Parse parses args; on a usage error it prints the error and the usage to stderr, since in a Pod
// that output is all a crash loop's logs will show. It returns the exit code when the command
// must stop: 0 after --help, 2 after a usage error.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer) (exit int, stop bool) {
	fs.SetOutput(stderr)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	}
	fmt.Fprintf(stderr, "Error: %v\n", err)
	if fs.Usage != nil {
		fs.Usage()
	} else {
		fmt.Fprintf(stderr, "Usage of %s:\n%s", fs.Name(), fs.FlagUsages())
	}
	return 2, true
}

// FlagValue is the value of the last --name in args ("--name=v" or "--name v"), as pflag reads
// them: how the plugin and the tools read a controller's command line from its Deployment or
// their own options without parsing every flag it has.
func FlagValue(args []string, name string) (string, bool) {
	v, found := "", false
	for i, arg := range args {
		if after, ok := strings.CutPrefix(arg, "--"+name+"="); ok {
			v, found = after, true
		} else if arg == "--"+name && i+1 < len(args) {
			v, found = args[i+1], true
		}
	}
	return v, found
}
