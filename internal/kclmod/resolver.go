package kclmod

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Masterminds/semver/v3"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
)

// Defaults of Options.
const (
	DefaultRegistry        = "ghcr.io"
	DefaultRepository      = "kcl-lang"
	DefaultMaxCacheBytes   = int64(2) << 30
	DefaultMaxPackageBytes = int64(512) << 20
	DefaultMaxPackageFiles = 100000
)

// Options configure a Resolver.
type Options struct {
	// CacheDir holds downloaded packages; it is shared by every caller (and process) using it.
	CacheDir string
	// MaxCacheBytes bounds the cache (the size of the package files): least recently used
	// entries nobody is using are removed beyond it. 0 means DefaultMaxCacheBytes; negative,
	// unbounded.
	MaxCacheBytes int64
	// DefaultRegistry and DefaultRepository are where `name = "version"` dependencies live:
	// oci://<DefaultRegistry>/<DefaultRepository>/<name>:<version> (kcl's KPM_REG and KPM_REPO).
	DefaultRegistry   string
	DefaultRepository string
	// ForbidRemote allows vendored and local path dependencies only; a dependency that would
	// be downloaded is an error naming it.
	ForbidRemote bool
	// InsecureRegistries are registries reached over plain HTTP. go-containerregistry already
	// does so for loopback and private (RFC 1918) addresses.
	InsecureRegistries []string
	// Transport carries the registry and Git requests. nil means go-containerregistry's default
	// transport without a proxy (HTTP(S)_PROXY is not used: a proxy would connect on our behalf,
	// out of reach of the address checks). A given Transport must be an *http.Transport; it is
	// cloned and its dialing replaced by the checking dialer (a Proxy set on it is kept, and the
	// address checks then apply to the proxy's address).
	Transport http.RoundTripper
	// Proxy, when set, carries every registry and Git request (HTTP CONNECT for HTTPS), for
	// clusters that reach registries only through one. Opt-in: HTTP(S)_PROXY is never read. The
	// host allow-list still applies to the registry or Git server asked for; the address checks
	// then apply to the proxy's address, and what the proxy connects to is out of their reach.
	Proxy *url.URL
	// MaxPackageBytes bounds the size of the files of one downloaded package; 0 means
	// DefaultMaxPackageBytes.
	MaxPackageBytes int64
	// MaxPackageFiles bounds the entries of one downloaded package: files, directories and
	// symlinks, counted as the archive or the Git tree is read, so that extraction stops at the
	// first entry past it. 0 means DefaultMaxPackageFiles.
	MaxPackageFiles int

	// AllowedHosts are the hosts dependencies may be fetched from, registries and Git servers:
	// path.Match globs on the host name, case-insensitive ("ghcr.io", "*.example.com", where *
	// also matches dots), or on host:port ("registry.local:5000") to allow one port only. Every
	// request is checked, so the hosts a registry redirects blob downloads to or sends for tokens
	// must be listed too (ghcr.io: pkg-containers.githubusercontent.com; Docker Hub: auth.docker.io
	// and production.cloudflare.docker.com). DefaultRegistry is not implicitly allowed. Empty (the
	// default) allows any host.
	AllowedHosts []string
	// AllowedNetworks are addresses that may be connected to although they are this host's own
	// (its interfaces' addresses), in a special-purpose range (specialRanges: IANA's IPv4 and IPv6
	// registries, loopback, private, link-local, documentation and the rest; multicast; IPv6
	// outside 2000::/3) or in DeniedNetworks. By default (none) those are refused: every
	// address a host name resolves to is checked when connecting, for every request and
	// redirect, so DNS names pointing there (or re-pointed there between two lookups) do not
	// reach them. An in-cluster registry or Git server is allowed by naming its address or
	// range here. Tests and local development set 127.0.0.0/8.
	AllowedNetworks []netip.Prefix
	// DeniedNetworks are refused as well (for example the cluster's pod and service ranges, so
	// that dependencies cannot be used to probe in-cluster services). Default: none.
	DeniedNetworks []netip.Prefix

	// MinSpeed and LowSpeedTime bound how slowly a server may answer, as curl's --speed-limit
	// and --speed-time: a transfer averaging under MinSpeed bytes per second over LowSpeedTime
	// fails, and so does one with nothing received for LowSpeedTime (a drip of a byte every few
	// seconds passes an idle timeout, not this). 0 means DefaultMinSpeed and
	// DefaultLowSpeedTime; a negative MinSpeed turns the rule off.
	MinSpeed     int64
	LowSpeedTime time.Duration

	// OnFetch, when set, is called with a dependency's label before it is fetched from its
	// server, so that a process dying on the answer can be told which one it was.
	OnFetch func(label string) `json:"-"`
}

// ErrRemoteForbidden is wrapped by the error of a dependency that would be downloaded while
// Options.ForbidRemote is set.
var ErrRemoteForbidden = errors.New("remote dependencies are forbidden")

// Resolver resolves kcl.mod dependencies to directories. It is safe for concurrent use.
type Resolver struct {
	opts  Options
	cache *cache
	net   *netGuard

	downloads atomic.Int64
	hits      atomic.Int64
}

// RegistryFromEnv is the registry and repository of dependencies given by version only, as kcl
// takes them: KPM_REG and KPM_REPO, else the defaults.
func RegistryFromEnv() (registry, repository string) {
	registry, repository = os.Getenv("KPM_REG"), os.Getenv("KPM_REPO")
	if registry == "" {
		registry = DefaultRegistry
	}
	if repository == "" {
		repository = DefaultRepository
	}
	return registry, repository
}

// New returns a Resolver over the cache in o.CacheDir.
func New(o Options) (*Resolver, error) {
	if o.CacheDir == "" {
		return nil, errors.New("kclmod: a cache directory is required")
	}
	if o.DefaultRegistry == "" {
		o.DefaultRegistry = DefaultRegistry
	}
	if o.DefaultRepository == "" {
		o.DefaultRepository = DefaultRepository
	}
	o.DefaultRepository = strings.Trim(o.DefaultRepository, "/")
	if o.MaxCacheBytes == 0 {
		o.MaxCacheBytes = DefaultMaxCacheBytes
	}
	if o.MaxPackageBytes <= 0 {
		o.MaxPackageBytes = DefaultMaxPackageBytes
	}
	if o.MaxPackageFiles <= 0 {
		o.MaxPackageFiles = DefaultMaxPackageFiles
	}
	guard, err := guardOf(o)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.CacheDir)
	if err != nil {
		return nil, err
	}
	c, err := newCache(dir, o.MaxCacheBytes)
	if err != nil {
		return nil, fmt.Errorf("kclmod: cache directory: %w", err)
	}
	return &Resolver{opts: o, cache: c, net: guard}, nil
}

// Stats are a Resolver's totals since New.
type Stats struct {
	// Downloads counts packages fetched from a registry or a Git server into the cache.
	Downloads int64
	// CacheHits counts remote dependencies served from the cache.
	CacheHits int64
}

// Stats returns the Resolver's totals.
func (r *Resolver) Stats() Stats {
	return Stats{Downloads: r.downloads.Load(), CacheHits: r.hits.Load()}
}

// Source kinds of a resolved Package.
const (
	SourcePath   = "path"
	SourceVendor = "vendor"
	SourceOCI    = "oci"
	SourceGit    = "git"
)

// Package is one resolved dependency.
type Package struct {
	// Name is the name programs import it by (the kcl.mod key, '-' replaced by '_').
	Name string
	// Path is the package's directory (absolute).
	Path string
	// Source is SourcePath, SourceVendor, SourceOCI or SourceGit.
	Source string
	// Location is oci://host/repo:tag, the Git URL and reference, or the directory relative to
	// the source root (path and vendor).
	Location string
	// Version is the OCI tag, Git reference or version it was resolved at.
	Version string
	// Digest is the OCI manifest digest or the Git commit.
	Digest string
	// Sum is kcl's checksum of Path (not computed for local paths).
	Sum string
	// SumVerified reports that kcl.mod.lock had a sum for this package and it matched.
	SumVerified bool
	// Cached reports a remote package served from the cache without downloading it.
	Cached bool
	// RequiredBy is the name of the package whose kcl.mod declares it ("" for the root).
	RequiredBy string
}

// Result is the outcome of Resolve. The directories of cached packages stay valid (they are not
// evicted) until Release.
type Result struct {
	// ModDir is the directory of the root kcl.mod ("" when there is none).
	ModDir string
	// Packages are every dependency, transitive ones included, one per name, in resolution
	// order (breadth first; a kcl.mod's dependencies by name).
	Packages []Package
	// Downloads and CacheHits count this call's remote packages.
	Downloads int
	CacheHits int
	// Warnings are conflicting requirements that were ignored (the first one wins).
	Warnings []string

	mu      sync.Mutex
	pins    []*os.File
	entries []string // cache directories the packages are in
}

// Release lets the cache evict the packages of this result. The Result must not be used after.
func (res *Result) Release() {
	if res == nil {
		return
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	for _, p := range res.pins {
		p.Close()
	}
	res.pins = nil
}

// NeedsStaging tells whether Stage has anything to place: fetched (OCI or Git) dependencies.
func (res *Result) NeedsStaging() bool {
	if res == nil {
		return false
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	return len(res.entries) > 0
}

// ExternalPkgs returns the packages as the engine's `-E name=path` arguments.
func (res *Result) ExternalPkgs() []kcllib.ExternalPkg {
	if res == nil {
		return nil
	}
	out := make([]kcllib.ExternalPkg, 0, len(res.Packages))
	for _, p := range res.Packages {
		out = append(out, kcllib.ExternalPkg{PkgName: p.Name, PkgPath: p.Path})
	}
	return out
}

func (res *Result) addEntry(dir string) {
	res.mu.Lock()
	defer res.mu.Unlock()
	if !slices.Contains(res.entries, dir) {
		res.entries = append(res.entries, dir)
	}
}

func (res *Result) addPin(f *os.File) {
	res.mu.Lock()
	res.pins = append(res.pins, f)
	res.mu.Unlock()
}

// node is a package whose dependencies are being resolved.
type node struct {
	name  string // import name ("" for the root)
	dir   string
	mod   *ModFile
	lock  *LockFile
	bound string // local path dependencies must stay inside
}

// Resolve resolves the dependencies of the package in pkgDir (its kcl.mod, or the nearest one
// above it inside sourceRoot) and of their packages, transitively. Local path dependencies,
// and the package itself, must be inside sourceRoot. creds are used for this call only. On
// success the caller must Release the result once the engine no longer needs the directories.
func (r *Resolver) Resolve(ctx context.Context, pkgDir, sourceRoot string, creds Credentials) (res *Result, err error) {
	root, err := realDir(sourceRoot)
	if err != nil {
		return nil, fmt.Errorf("source root: %w", err)
	}
	dir, err := realDir(pkgDir)
	if err != nil {
		return nil, fmt.Errorf("package directory: %w", err)
	}
	if !fstree.Within(root, dir) {
		return nil, fmt.Errorf("package directory %s is not inside the source root", pkgDir)
	}
	res = &Result{}
	modDir := findModDir(dir, root)
	if modDir == "" {
		return res, nil
	}
	res.ModDir = modDir
	kc, err := parseDockerConfig(creds.DockerConfigJSON)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			res.Release()
			res = nil
		}
	}()
	top, err := loadNode("", modDir, root, root)
	if err != nil {
		return nil, err
	}
	w := &walk{r: r, ctx: ctx, root: root, top: top, creds: creds, kc: kc, res: res, chosen: map[string]string{}}
	if top.mod.Package.Name != "" {
		w.chosen[strings.ReplaceAll(top.mod.Package.Name, "-", "_")] = "(the package itself)"
	}
	queue := []*node{top}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, d := range n.mod.Dependencies {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			child, err := w.dependency(n, d)
			if err != nil {
				return nil, err
			}
			if child != nil {
				queue = append(queue, child)
			}
		}
	}
	return res, nil
}

type walk struct {
	r      *Resolver
	ctx    context.Context
	root   string
	top    *node
	creds  Credentials
	kc     *keychain
	res    *Result
	chosen map[string]string // import name -> identity of the chosen requirement
}

// loadNode reads the kcl.mod (if any) and kcl.mod.lock of a package directory.
func loadNode(name, dir, bound, sourceRoot string) (*node, error) {
	n := &node{name: name, dir: dir, bound: bound, mod: &ModFile{}, lock: &LockFile{}}
	if _, err := os.Stat(filepath.Join(dir, ModFileName)); err != nil {
		return n, nil
	}
	shown := func(f string) string {
		if fstree.Within(sourceRoot, dir) {
			return display(sourceRoot, filepath.Join(dir, f))
		}
		return fmt.Sprintf("the %s of package %q", f, name)
	}
	m, err := parseModFile(dir, shown(ModFileName))
	if err != nil {
		return nil, err
	}
	l, err := parseLockFile(dir, shown(LockFileName))
	if err != nil {
		return nil, err
	}
	n.mod, n.lock = m, l
	return n, nil
}

// dependency resolves d, required by n, and returns the node of its package when its own
// dependencies are still to be resolved.
func (w *walk) dependency(n *node, d Dependency) (*node, error) {
	label := fmt.Sprintf("dependency %q", d.Name)
	if n.name != "" {
		label = fmt.Sprintf("dependency %q of %q", d.Name, n.name)
	}
	if d.IsLocal() {
		return w.localDependency(n, d, label)
	}
	rd := w.pin(n, d)
	rd.label = label + " (" + rd.location + ")"
	if w.skip(rd.name, rd.ident) {
		return nil, nil
	}
	if vdir := w.vendored(n, rd.d, rd.ref); vdir != "" {
		return w.useVendored(n, rd, vdir)
	}
	if w.r.opts.ForbidRemote {
		return nil, fmt.Errorf("%s is not vendored (vendor/%s_%s) and %w",
			rd.label, rd.d.Package, rd.ref, ErrRemoteForbidden)
	}
	return w.download(n, rd)
}

// localDependency resolves a local path dependency, which must stay inside n's bound.
func (w *walk) localDependency(n *node, d Dependency, label string) (*node, error) {
	name := d.ImportName()
	p := d.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(n.dir, p)
	}
	real, err := realDir(p)
	if err != nil {
		return nil, fmt.Errorf("%s: path %q: %w", label, d.Path, errors.Unwrap(err))
	}
	if !fstree.Within(n.bound, real) {
		return nil, fmt.Errorf("%s: path %q is outside the source", label, d.Path)
	}
	if w.skip(name, "path:"+real) {
		return nil, nil
	}
	w.res.Packages = append(w.res.Packages, Package{Name: name, Path: real, Source: SourcePath,
		Location: display(w.root, real), RequiredBy: n.name})
	return loadNode(name, real, n.bound, w.root)
}

// remoteDep is a Git or OCI dependency pinned by its lock entry, if any.
type remoteDep struct {
	d        Dependency // with a Git source pinned to the lock's commit
	oci      *ociRef    // nil for Git; its tag is set once the latest is known
	name     string     // import name
	ref      string     // tag, commit, branch or version ("" for the latest)
	location string     // URL and ref, without credentials
	ident    string     // tells requirements of one name apart
	label    string     // names the dependency in errors
	sum      string     // the lock's sum, "" when not locked
	lockFile string     // the lock file sum comes from, for errors
}

// pin looks d up in the lock files: an unversioned dependency takes the locked reference, and a
// branch the locked commit, so that renders are reproducible until the lock changes.
func (w *walk) pin(n *node, d Dependency) remoteDep {
	rd := remoteDep{name: d.ImportName(), oci: w.r.ociSource(d), ref: d.Ref()}
	lock, lockFile := w.findLock(n, d, rd.ref)
	if rd.ref == "" && lock != nil {
		switch {
		case d.Git != nil && lock.Commit != "":
			g := *d.Git
			g.Commit = lock.Commit
			d.Git = &g
		case rd.oci != nil && (lock.OCITag != "" || lock.Version != ""):
			rd.oci.Tag = firstNonEmpty(lock.OCITag, lock.Version)
		}
		rd.ref = firstNonEmpty(lock.OCITag, lock.Commit, lock.GitTag, lock.Tag, lock.Version)
	} else if d.Git != nil && d.Git.Branch != "" && lock != nil && lock.Commit != "" {
		g := *d.Git
		g.Commit = lock.Commit
		d.Git = &g
	}
	if lock != nil {
		rd.sum, rd.lockFile = lock.Sum, lockFile
	}
	rd.d = d
	if d.Git != nil {
		rd.location = redactURL(d.Git.URL) + "@" + rd.ref
		rd.ident = "git:" + rd.location
	} else {
		rd.location = rd.oci.location()
		rd.ident = "oci:" + rd.location
	}
	return rd
}

// useVendored resolves rd to its vendored copy in vdir, which must match the lock's sum.
func (w *walk) useVendored(n *node, rd remoteDep, vdir string) (*node, error) {
	sum, err := Checksum(vdir)
	if err != nil {
		return nil, fmt.Errorf("%s: vendored in %s: %w", rd.label, display(w.root, vdir), err)
	}
	if rd.sum != "" && sum != rd.sum {
		return nil, fmt.Errorf("%s: checksum mismatch: %s expects sum %q, the vendored package %s has %q",
			rd.label, rd.lockFile, rd.sum, display(w.root, vdir), sum)
	}
	w.res.Packages = append(w.res.Packages, Package{Name: rd.name, Version: rd.ref, RequiredBy: n.name,
		Path: vdir, Source: SourceVendor, Location: display(w.root, vdir), Sum: sum, SumVerified: rd.sum != ""})
	return loadNode(rd.name, vdir, n.bound, w.root)
}

// download resolves rd from the cache, fetching it when missing, and checks the lock's sum.
func (w *walk) download(n *node, rd remoteDep) (*node, error) {
	var e *entry
	var downloaded bool
	var err error
	if w.r.opts.OnFetch != nil {
		w.r.opts.OnFetch(rd.label)
	}
	if rd.d.Git != nil {
		e, downloaded, err = w.r.fetchGit(w.ctx, *rd.d.Git, w.creds)
	} else {
		e, downloaded, err = w.r.fetchOCI(w.ctx, rd.oci, w.kc)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rd.label, err)
	}
	w.count(e, downloaded)
	dir, sum := e.pkgDir(), e.meta.Sum
	if rd.d.Git != nil && rd.d.Git.Package != "" {
		if dir, err = findPackage(dir, rd.d.Git.Package); err != nil {
			return nil, fmt.Errorf("%s: %w", rd.label, err)
		}
		sum = ""
	}
	if rd.sum != "" || sum == "" {
		// The sum compared with the lock is computed from the files the render will use, never
		// taken from the cache's metadata or from the registry's annotation.
		if sum, err = Checksum(dir); err != nil {
			return nil, fmt.Errorf("%s: %w", rd.label, err)
		}
	}
	if rd.sum != "" && sum != rd.sum {
		return nil, fmt.Errorf("%s: checksum mismatch: %s expects sum %q, the downloaded package has %q",
			rd.label, rd.lockFile, rd.sum, sum)
	}
	pkg := Package{Name: rd.name, Version: rd.ref, RequiredBy: n.name, Path: dir, Source: SourceGit,
		Location: rd.location, Digest: e.meta.Digest, Sum: sum, SumVerified: rd.sum != "", Cached: !downloaded}
	if rd.d.Git == nil {
		// an unversioned OCI dependency got the latest tag
		pkg.Source, pkg.Location, pkg.Version = SourceOCI, rd.oci.location(), rd.oci.Tag
	}
	w.res.Packages = append(w.res.Packages, pkg)
	return loadNode(rd.name, dir, e.pkgDir(), w.root)
}

// count records a remote package in the totals and keeps its cache entry for the result; a
// download may have taken the cache past its bound.
func (w *walk) count(e *entry, downloaded bool) {
	w.res.addPin(e.pin)
	if downloaded {
		w.res.Downloads++
		w.r.downloads.Add(1)
		if _, err := w.r.cache.evict(); err != nil {
			w.res.Warnings = append(w.res.Warnings, "cache eviction: "+err.Error())
		}
	} else {
		w.res.CacheHits++
		w.r.hits.Add(1)
	}
	w.res.addEntry(e.pkgDir())
}

// skip reports whether name was already resolved; a different requirement is a warning.
func (w *walk) skip(name, ident string) bool {
	prev, ok := w.chosen[name]
	if !ok {
		w.chosen[name] = ident
		return false
	}
	if prev != ident {
		w.res.Warnings = append(w.res.Warnings, fmt.Sprintf("dependency %q: %s ignored, %s is used", name, ident, prev))
	}
	return true
}

// findLock returns the lock entry of d at ref, from the root package's kcl.mod.lock or else
// from n's, and the lock file's name relative to the source root. An entry locked at another
// reference is stale and ignored.
func (w *walk) findLock(n *node, d Dependency, ref string) (*LockedDependency, string) {
	for _, ln := range []*node{w.top, n} {
		for _, key := range []string{d.Name, d.Package} {
			l, ok := ln.lock.Dependencies[key]
			if !ok {
				continue
			}
			refs := l.refs()
			match := ref == "" || len(refs) == 0
			for _, r := range refs {
				if r == ref {
					match = true
				}
			}
			if match {
				if fstree.Within(w.root, ln.dir) {
					return &l, display(w.root, filepath.Join(ln.dir, LockFileName))
				}
				return &l, fmt.Sprintf("the %s of package %q", LockFileName, ln.name)
			}
		}
		if n == w.top {
			break
		}
	}
	return nil, ""
}

// vendored returns the vendored copy of d, as kpm lays it out (vendor/<name>_<ref>) in the
// root package or in n, or "".
func (w *walk) vendored(n *node, d Dependency, ref string) string {
	var names []string
	for _, base := range []string{d.Package, d.Name} {
		if ref != "" {
			names = append(names, base+"_"+ref)
		}
	}
	for _, pn := range []*node{w.top, n} {
		vdir := filepath.Join(pn.dir, VendorDir)
		cands := names
		if ref == "" {
			cands = nil
			for _, base := range []string{d.Package, d.Name} {
				m, _ := filepath.Glob(filepath.Join(vdir, globEscape(base)+"_*"))
				if len(m) == 1 {
					cands = append(cands, filepath.Base(m[0]))
				}
			}
		}
		for _, c := range cands {
			if filepath.Base(c) != c || !filepath.IsLocal(c) {
				continue
			}
			real, err := realDir(filepath.Join(vdir, c))
			if err == nil && fstree.Within(pn.bound, real) {
				return real
			}
		}
	}
	return ""
}

// ociRef is an OCI dependency with the defaults filled in.
type ociRef struct {
	Registry, Repository, Tag, Digest string
}

func (o *ociRef) location() string {
	s := "oci://" + o.Registry + "/" + o.Repository
	if o.Digest != "" {
		return s + "@" + o.Digest
	}
	if o.Tag != "" {
		return s + ":" + o.Tag
	}
	return s
}

// ociSource returns where an OCI or short-form dependency lives; nil for Git and paths.
func (r *Resolver) ociSource(d Dependency) *ociRef {
	switch {
	case d.Git != nil || d.IsLocal():
		return nil
	case d.OCI != nil:
		o := &ociRef{Registry: d.OCI.Registry, Repository: d.OCI.Repository, Tag: d.OCI.Tag, Digest: d.OCI.Digest}
		if o.Registry == "" {
			o.Registry = r.opts.DefaultRegistry
		}
		if o.Tag == "" && o.Digest == "" {
			o.Tag = d.Version
		}
		return o
	default:
		return &ociRef{Registry: r.opts.DefaultRegistry, Repository: r.opts.DefaultRepository + "/" + d.Package, Tag: d.Version}
	}
}

// findPackage finds the directory under root whose kcl.mod names the package name.
func findPackage(root, name string) (string, error) {
	var found string
	err := filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.IsDir() {
			return nil
		}
		if m, err := ParseModFile(p); err == nil && m.Package.Name == name {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if found == "" {
		return "", fmt.Errorf("no package %q in the repository", name)
	}
	return found, nil
}

// findModDir returns the nearest directory from dir up to root holding a kcl.mod, or "".
func findModDir(dir, root string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(filepath.Join(d, ModFileName)); err == nil && !st.IsDir() {
			return d
		}
		if d == root || filepath.Dir(d) == d {
			return ""
		}
	}
}

// realDir returns the absolute, symlink-free path of an existing directory.
func realDir(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(a)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, errors.Unwrap(err))
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s: %w", p, errors.New("not a directory"))
	}
	return real, nil
}

// display shows p relative to root when inside it.
func display(root, p string) string {
	if rel, err := filepath.Rel(root, p); err == nil && fstree.Within(root, p) {
		return filepath.ToSlash(rel)
	}
	return p
}

// redactURL removes the user information of a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		if i := strings.Index(s, "@"); i >= 0 && strings.Contains(s[:i], "://") {
			return s[:strings.Index(s, "://")+3] + "REDACTED" + s[i:]
		}
		return s
	}
	u.User = nil
	return u.String()
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func globEscape(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(s)
}

// latestVersion picks the highest semantic version among tags (a leading "v" allowed), by
// semver precedence: 1.0.0-rc.10 after 1.0.0-rc.9, 1.0.0 after both. Tags that are not semver
// (latest, 1.2, 01.2.3) are ignored.
func latestVersion(tags []string) string {
	var best *semver.Version
	latest := ""
	for _, t := range tags {
		v, err := semver.StrictNewVersion(strings.TrimPrefix(t, "v"))
		if err != nil {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, latest = v, t
		}
	}
	return latest
}
