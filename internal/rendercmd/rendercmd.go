// Package rendercmd is the `render` subcommand: `kcl run` on a laptop, through the same engine
// workers and render code as the controller, with the same flags and meanings as `kcl run`.
package rendercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/kcl-flux/kcl-artifact-controller/internal/cli"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

type flags struct {
	opts        render.Options
	arguments   []string
	externals   []string
	output      string
	kclLib      string
	timeout     time.Duration
	memoryLimit uint64
	deps        kclmod.Options
	depFetch    depfetch.Options
	registryCfg string
	sandbox     bool
	// review is a checkout under review (--diff-from, --diff with a KCLArtifact): rendered from
	// a copy without version control metadata, confined unless --sandbox=false.
	review bool
	staged *stagedTree
	// secrets are the argument values read from Secrets, masked in diffs wherever they land;
	// shared by the copies of flags a diff makes.
	secrets   *secretValues
	maxOutput uint64
	networks  []string
	phase     string
	proxy     string
	diff      diffFlags
	// kclArtifact and kclArtifactFile name the KCLArtifact whose inputs render: in the cluster, or
	// in a manifest file (then kclArtifact picks one of several). sourceDir is the checkout of
	// its source.
	kclArtifact, kclArtifactFile, sourceDir string
}

func newFlagSet(f *flags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defaultRegistry, defaultRepository := kclmod.RegistryFromEnv()
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: kcl-artifact-controller render [flags] [file or directory ...]\n\n"+
			"Renders a KCL program as `kcl run` does. Flags:\n%s", fs.FlagUsages())
	}
	o := &f.opts
	// -D, -O and -S stay string arrays, not pflag's string slices: those split on every comma
	// (CSV), which cuts values such as -O x.ids=[1,2]; complete splits them with splitList.
	fs.StringArrayVarP(&f.arguments, "argument", "D", nil,
		"top-level argument name=value (repeatable, or a=1,b=2: a comma before name= starts the next)")
	fs.StringArrayVarP(&o.Settings, "setting", "Y", nil, "kcl.yaml settings file (repeatable)")
	fs.StringArrayVarP(&o.Overrides, "overrides", "O", nil,
		"override path=value, e.g. config.image=\"nginx:2\" (repeatable, or comma-separated)")
	fs.StringArrayVarP(&o.PathSelectors, "path_selector", "S", nil,
		"output only the value at this path, e.g. config.image (repeatable, or comma-separated)")
	fs.StringArrayVarP(&f.externals, "external", "E", nil, "external package name=path (repeatable)")
	fs.BoolVarP(&o.SortKeys, "sort_keys", "k", false, "sort keys in the output")
	fs.BoolVarP(&o.DisableNone, "disable_none", "n", false, "drop attributes whose value is None")
	fs.BoolVarP(&o.ShowHidden, "show_hidden", "H", false, "show hidden attributes")
	fs.BoolVarP(&o.StrictRangeCheck, "strict_range_check", "r", false, "check numeric ranges strictly")
	fs.BoolVarP(&o.Debug, "debug", "d", false, "debug mode")
	fs.StringVarP(&f.output, "output", "o", "", "write the result to this file instead of stdout; with --diff or --diff-from, the format of the differences: unified or markdown")
	fs.StringVar(&o.Format, "format", render.FormatYAML, "output format: yaml or json")
	fs.StringVar(&f.phase, "phase", "", "print only the objects of this deploy phase (pre, main or post), as the artifact's "+
		"<phase>/manifests.yaml holds them; see kcl.contrib.fluxcd.io/phase")
	fs.StringVar(&f.kclLib, "kcl-lib", "", "path of the KCL engine library (default: $KCL_LIB, beside the binary, bin/)")
	fs.DurationVar(&f.timeout, "timeout", kclworker.DefaultTimeout, "render deadline; the engine worker is killed when it passes")
	fs.Uint64Var(&f.memoryLimit, "memory-limit", kclworker.DefaultMemoryLimit, "memory (data) limit of the engine worker, in bytes")
	fs.Uint64Var(&f.maxOutput, "max-output-size", kclworker.DefaultMaxOutput, "the largest rendered output, in bytes")
	fs.BoolVar(&f.sandbox, "sandbox", false, "render confined as the controller does: the program reads only the current directory tree "+
		"(without .git and other version control metadata) and its dependencies; no writes, environment or network (needs Linux Landlock). "+
		"On by default with --diff-from and with --kclartifact/--kclartifact-file, where the program is a checkout under review")
	fs.StringVar(&f.deps.CacheDir, "deps-cache-dir", defaultCacheDir(), "cache of kcl.mod dependencies (the controller's --kcl-deps-cache-dir)")
	fs.BoolVar(&f.deps.ForbidRemote, "no-remote-deps", false, "allow only vendored and local path kcl.mod dependencies")
	fs.StringVar(&f.deps.DefaultRegistry, "default-registry", defaultRegistry, "registry of dependencies given by version only (kcl's KPM_REG)")
	fs.StringVar(&f.deps.DefaultRepository, "default-repository", defaultRepository, "repository prefix of dependencies given by version only (kcl's KPM_REPO)")
	fs.StringSliceVar(&f.deps.AllowedHosts, "deps-allowed-hosts", nil, "hosts (globs) dependencies may come from; empty allows any")
	fs.StringVar(&f.proxy, "deps-proxy", "", "an HTTP(S) proxy for dependency fetches (the controller's --kcl-deps-proxy; HTTPS_PROXY is not used)")
	fs.StringSliceVar(&f.networks, "deps-allowed-networks", nil,
		"CIDRs dependencies may come from although refused by default, as by the controller: this machine's own addresses and every "+
			"special-purpose range (loopback, private, link-local, documentation, multicast...; a registry on this machine needs 127.0.0.0/8)")
	fs.DurationVar(&f.depFetch.Timeout, "deps-timeout", depfetch.DefaultTimeout,
		"the longest fetching the kcl.mod dependencies may take; the fetch process is killed after (the controller's --kcl-deps-timeout)")
	fs.Uint64Var(&f.depFetch.MemoryLimit, "deps-memory-limit", depfetch.DefaultMemoryLimit,
		"memory (data) limit of the dependency fetch process, in bytes")
	fs.StringVar(&f.registryCfg, "registry-config", defaultDockerConfig(), "docker config JSON with registry credentials")
	addDiffFlags(fs, &f.diff)
	fs.StringVar(&f.kclArtifact, "kclartifact", "", "render as this KCLArtifact ([namespace/]name) does: "+
		"its path in the source checked out in the argument directory (default .), entries, settings, arguments and "+
		"argumentsFrom; print the output, or with --diff or --diff-from compare what its Kustomizations would apply; "+
		"read from the cluster unless --kclartifact-file")
	fs.StringVar(&f.kclArtifactFile, "kclartifact-file", "", "read the KCLArtifact from this manifest file "+
		"(with --diff-from, from each checkout); its argumentsFrom are read from the cluster, except with --diff-from")
	return fs
}

func defaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "kcl-artifact-controller", "deps")
	}
	return filepath.Join(os.TempDir(), "kcl-artifact-controller-deps")
}

func defaultDockerConfig() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(home, ".docker", "config.json")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// Main runs the command and returns the exit code. stdout is the output, exactly as rendered;
// stderr is for a human, and carries what the program prints and the engine's errors, which quote
// the program: every control in it is shown as an escape.
func Main(args []string, stdout, rawStderr io.Writer) int {
	stderr := termsafe.NewWriter(rawStderr)
	defer stderr.Flush()
	f := flags{secrets: &secretValues{}}
	fs := newFlagSet(&f, stderr)
	if exit, stop := cli.Parse(fs, args, stderr); stop {
		return exit
	}
	if err := f.completeAll(fs); err != nil {
		fmt.Fprintln(stderr, "Error:", err)
		// with --diff, 1 means differences: an invalid argument is an error like any other
		if errors.As(err, new(argError)) && !f.diff.enabled {
			return 1
		}
		return 2
	}
	if f.review && !f.sandbox {
		fmt.Fprintln(stderr, "render: --sandbox=false: the program reads and writes whatever this user can (absolute paths, "+
			"the environment, the network); only version control metadata is kept out of its tree. Never so for an untrusted pull request.")
	}
	if f.diff.enabled || f.diff.from != "" {
		return runDiff(f, stdout, stderr)
	}
	var err error
	if f.fromKCLArtifact() {
		err = runKCLArtifact(f, stdout, stderr)
	} else {
		err = run(f, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// completeAll checks and completes the flags; with a KCLArtifact the argument is its source.
func (f *flags) completeAll(fs *flag.FlagSet) error {
	inputs := fs.Args()
	if f.fromKCLArtifact() {
		if err := f.checkKCLArtifactFlags(fs.Changed, inputs); err != nil {
			return err
		}
		inputs = nil
	}
	if f.diff.enabled && f.diff.from != "" {
		return errors.New("--diff compares with the cluster, --diff-from with another checkout: give one")
	}
	if f.diff.enabled || f.diff.from != "" {
		if err := f.diff.setFormat(f.output); err != nil {
			return err
		}
		f.output = ""
	}
	// A pull request's program is untrusted: where the input is a checkout under review (another
	// checkout, or the source of a KCLArtifact), it is confined unless asked otherwise, and never
	// sees version control metadata.
	f.review = f.diff.from != "" || f.fromKCLArtifact()
	if f.review && !fs.Changed("sandbox") {
		f.sandbox = true
	}
	return f.complete(inputs)
}

func (f *flags) complete(inputs []string) error {
	o := &f.opts
	for _, in := range inputs {
		// kcl compiles only .k files; a YAML file among the inputs is a settings file, as in
		// `kcl run -Y a.yaml b.yaml`.
		if ext := filepath.Ext(in); ext == ".yaml" || ext == ".yml" {
			o.Settings = append(o.Settings, in)
		} else {
			o.Inputs = append(o.Inputs, in)
		}
	}
	if o.Format != render.FormatYAML && o.Format != render.FormatJSON {
		return fmt.Errorf("--format must be yaml or json, not %q", o.Format)
	}
	if f.phase != "" {
		if _, _, err := phases.Of(map[string]string{phases.Annotation: f.phase}); err != nil {
			return fmt.Errorf("--phase: %q is not pre, main or post", f.phase)
		}
		if o.Format != render.FormatYAML {
			return errors.New("--phase needs --format yaml")
		}
	}
	o.Overrides = splitEach(o.Overrides, nil)
	o.PathSelectors = splitEach(o.PathSelectors, nil)
	for _, a := range splitEach(f.arguments, startsArgument) {
		arg, err := parseArgument(a)
		if err != nil {
			return err
		}
		o.Arguments = append(o.Arguments, arg)
	}
	for _, e := range f.externals {
		name, path, ok := strings.Cut(e, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("invalid value for external packages: -E %s (expected name=path)", e)
		}
		o.Externals = append(o.Externals, kcllib.ExternalPkg{PkgName: name, PkgPath: path})
	}
	if _, err := kcllib.Find(f.kclLib); err != nil {
		return err
	}
	return nil
}

// resolveDependencies resolves the kcl.mod dependencies of the package being rendered, with the
// same resolver and cache layout as the controller, and stages fetched packages into stageDir.
// Confined, path dependencies must stay in root, as in the controller.
func (f *flags) resolveDependencies(ctx context.Context, root, stageDir string) error {
	// a KCLArtifact's dependencies are those of its package, whatever its entries, as in the controller
	pkgDir := "."
	switch in := f.opts.Inputs; {
	case f.fromKCLArtifact():
		pkgDir = f.opts.Dir
	case len(in) > 0:
		pkgDir = in[0]
		if !filepath.IsAbs(pkgDir) && f.opts.Dir != "" {
			pkgDir = filepath.Join(f.opts.Dir, pkgDir)
		}
		if fi, err := os.Stat(pkgDir); err != nil || !fi.IsDir() {
			pkgDir = filepath.Dir(pkgDir)
		}
	case f.opts.Dir != "":
		pkgDir = f.opts.Dir
	}
	var creds kclmod.Credentials
	if f.registryCfg != "" {
		b, err := os.ReadFile(f.registryCfg)
		if err != nil {
			return fmt.Errorf("reading --registry-config: %w", err)
		}
		creds.DockerConfigJSON = b
	}
	nets, err := kclmod.ParseNetworks(f.networks)
	if err != nil {
		return fmt.Errorf("--deps-allowed-networks: %w", err)
	}
	f.deps.AllowedNetworks = nets
	if f.deps.Proxy, err = kclmod.ParseProxy(f.proxy); err != nil {
		return fmt.Errorf("--deps-proxy: %w", err)
	}
	// Remote dependencies are fetched by a process of their own, bounded as the controller's
	// are: a hostile server in a pull request's kcl.mod fails this render, never crashes it.
	o := f.depFetch
	o.Resolver, o.Sandbox, o.Size = f.deps, f.sandbox, 1
	fetcher, err := depfetch.New(o)
	if err != nil {
		return err
	}
	res, err := fetcher.Resolve(ctx, depfetch.Request{Domain: "render", PkgDir: pkgDir, SourceRoot: root,
		ReadRoots: []string{root}, Deps: func() (string, error) { return stageDir, nil }, Creds: creds})
	if err != nil {
		return err
	}
	f.opts.Dependencies = res.ExternalPkgs()
	return nil
}

// argError is an invalid -D value: like kcl, it fails the render (exit 1), not the flag parsing.
type argError struct{ arg string }

func (e argError) Error() string {
	return "EvaluationError: Invalid value for top level arguments: -D " + e.arg + " (expected name=value)"
}

// parseArgument splits name=value as kcl does: exactly one '=', neither side empty.
func parseArgument(a string) (render.Argument, error) {
	parts := strings.Split(a, "=")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return render.Argument{}, argError{a}
	}
	return render.Argument{Name: parts[0], Value: parts[1]}, nil
}

// splitEach splits every value of a repeatable flag with splitList, in order.
func splitEach(values []string, startsItem func(rest string) bool) []string {
	var items []string
	for _, v := range values {
		items = append(items, splitList(v, startsItem)...)
	}
	return items
}

// splitList splits one flag value into the items it lists. kcl run (0.12) reads -O and -S as
// comma-separated lists, but with CSV rules, which cut -O x.ids=[1,2] in two and refuse
// -O x.name="Bob" (kcl-lang/cli#232). No KCL path or expression has a comma outside brackets,
// braces, parentheses or a string, so only such a comma separates items; quotes are kept, as
// they belong to the KCL literal. An unclosed quote or bracket leaves the rest unsplit, for
// the engine to report. A non-nil startsItem must also accept the text after the comma.
func splitList(s string, startsItem func(rest string) bool) []string {
	var items []string
	depth, quote, start := 0, byte(0), 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0 && c == '\\':
			i++ // an escaped character never closes the string
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{' || c == '(':
			depth++
		case c == ']' || c == '}' || c == ')':
			depth = max(depth-1, 0)
		case c == ',' && depth == 0 && (startsItem == nil || startsItem(s[i+1:])):
			items = append(items, s[start:i])
			start = i + 1
		}
	}
	return append(items, s[start:])
}

// startsArgument reports whether rest begins with name=, a new -D argument. kcl run never
// splits -D: -D hosts=a,b is the string "a,b" there and must stay so here. Only a comma before
// name= starts another argument: as one value, a second '=' fails parseArgument anyway.
func startsArgument(rest string) bool {
	name, _, ok := strings.Cut(rest, "=")
	return ok && name != "" && !strings.ContainsAny(name, ",[]{}()\"' ")
}

func run(f flags, stdout io.Writer) error {
	ctx := context.Background()
	eng, cleanup, err := f.engine(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := render.Render(ctx, eng, f.opts)
	if err != nil {
		return f.shown(err)
	}
	// what the program prints comes first, as kcl run prints it, escaped as on stderr: it is
	// for a human, the objects after it are the data
	if _, err := io.WriteString(stdout, termsafe.Text(res.Log)); err != nil {
		return err
	}
	return f.print(res, stdout)
}

// print writes a render's output as asked: all of it or one phase, into --output or stdout.
func (f *flags) print(res *render.Result, stdout io.Writer) error {
	var err error
	switch {
	case f.phase != "":
		res.Output, err = asArtifact(res.Output, []phases.Phase{phases.Phase(f.phase)})
	case f.fromKCLArtifact():
		// what the KCLArtifact publishes, rather than the program's output as kcl prints it
		res.Output, err = asArtifact(res.Output, phases.All)
	}
	if err != nil {
		return err
	}
	if f.output != "" {
		out, err := os.Create(f.output)
		if err != nil {
			return err
		}
		if err := res.WriteOutput(out); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return res.WriteOutput(stdout)
}

// asArtifact returns the objects of the given deploy phases, in order, as the artifact's
// <phase>/manifests.yaml files hold them: hooks that are not run left out, the pre and post Jobs
// stamped with the output's revision.
func asArtifact(output string, want []phases.Phase) (string, error) {
	parts := map[phases.Phase]*strings.Builder{}
	for _, p := range want {
		parts[p] = &strings.Builder{}
	}
	_, err := manifests.StreamPhases(strings.NewReader(output), func(q phases.Phase) io.Writer {
		if b := parts[q]; b != nil {
			return b
		}
		return io.Discard
	}, 0, manifests.OutputRevision(output))
	var docs []string
	for _, p := range want {
		if s := parts[p].String(); s != "" {
			docs = append(docs, s)
		}
	}
	return strings.Join(docs, "---\n"), err
}

// engine resolves the dependencies and returns the engine to render with: an unconfined worker
// as `kcl run` would be, or with --sandbox a worker confined to the tree it renders (a copy
// without version control metadata) and the staged dependencies. A checkout under review is
// always rendered from such a copy, confined or not.
func (f *flags) engine(ctx context.Context) (render.Engine, func(), error) {
	lib, _ := kcllib.Find(f.kclLib)
	o := kclworker.Options{Size: 1, LibPath: lib, Timeout: f.timeout, MemoryLimit: f.memoryLimit, Sandbox: f.sandbox,
		MaxOutput: f.maxOutput}
	f.opts.MaxOutput = int(f.maxOutput)
	cwd, err := filepath.Abs(".")
	if err != nil {
		return nil, nil, err
	}
	// A KCLArtifact's program is in its package directory, inside the checkout of its source.
	base, root := cwd, cwd
	if f.opts.Dir != "" {
		base, root = f.opts.Dir, f.opts.Root
	}
	if f.sandbox {
		if err := sandbox.Check(); err != nil {
			return nil, nil, err
		}
	}
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if f.sandbox || f.review {
		if root, base, err = f.stageTree(root, base); err != nil {
			return nil, nil, err
		}
		undo = append(undo, func() { os.RemoveAll(f.staged.copy) })
	}
	deps, err := os.MkdirTemp("", "kcl-render-deps-")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	undo = append(undo, func() { os.RemoveAll(deps) })
	pool, err := kclworker.New(o)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	undo = append(undo, pool.Close)
	// On a laptop the whole filesystem is the source: path dependencies may point anywhere.
	resolveRoot := "/"
	if f.sandbox {
		resolveRoot = root
	}
	if err := f.resolveDependencies(ctx, resolveRoot, deps); err != nil {
		cleanup()
		return nil, nil, err
	}
	if !f.sandbox {
		// relative paths in the program resolve against its directory, as with kcl
		return pool.Session(kclworker.Domain{}, base), cleanup, nil
	}
	f.opts.Root = root
	return pool.Session(kclworker.Domain{Name: "render", Roots: []string{root, deps}}, base), cleanup, nil
}

// secretValues collects the values of Secrets a render used.
type secretValues struct{ values []string }

func (s *secretValues) add(v []string) {
	if s != nil {
		s.values = append(s.values, v...)
	}
}

func (s *secretValues) all() []string {
	if s == nil {
		return nil
	}
	return s.values
}
