package cli

import (
	"bytes"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"
)

func TestParse(t *testing.T) {
	for name, tc := range map[string]struct {
		args       []string
		exit       int
		stop       bool
		wantStderr []string
	}{
		"valid":        {args: []string{"--name=x"}},
		"help":         {args: []string{"--help"}, stop: true, wantStderr: []string{"Usage of test"}},
		"unknown flag": {args: []string{"--bogus"}, exit: 2, stop: true, wantStderr: []string{"Error: unknown flag: --bogus", "--name"}},
		"bad value":    {args: []string{"--count=many"}, exit: 2, stop: true, wantStderr: []string{"Error: invalid argument \"many\"", "--count"}},
	} {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.String("name", "", "a name")
			fs.Int("count", 0, "a count")
			var stderr bytes.Buffer
			exit, stop := Parse(fs, tc.args, &stderr)
			if exit != tc.exit || stop != tc.stop {
				t.Fatalf("Parse = (%d, %v), want (%d, %v)", exit, stop, tc.exit, tc.stop)
			}
			for _, w := range tc.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if len(tc.wantStderr) == 0 && stderr.Len() > 0 {
				t.Errorf("unexpected output: %s", stderr.String())
			}
		})
	}
}

func TestFlagValue(t *testing.T) {
	for _, c := range []struct {
		args       []string
		name, want string
		found      bool
	}{
		{[]string{"run", "--storage-addr=:9090"}, "storage-addr", ":9090", true},
		{[]string{"run", "--ui-addr", "127.0.0.1:1", "--ui-addr=:2"}, "ui-addr", ":2", true}, // the last wins
		{[]string{"run", "--ui-addr="}, "ui-addr", "", true},
		{[]string{"run", "--ui-address=x", "--ui-addr"}, "ui-addr", "", false},
	} {
		if got, found := FlagValue(c.args, c.name); got != c.want || found != c.found {
			t.Errorf("FlagValue(%q, %s) = %q, %v; want %q, %v", c.args, c.name, got, found, c.want, c.found)
		}
	}
}
