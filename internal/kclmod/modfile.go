package kclmod

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// File names of a KCL package.
const (
	ModFileName  = "kcl.mod"
	LockFileName = "kcl.mod.lock"
	VendorDir    = "vendor"
)

// ModFile is a parsed kcl.mod.
type ModFile struct {
	Package PackageSection
	Profile Profile
	// Dependencies in the order of their names.
	Dependencies []Dependency
}

// PackageSection is the [package] section.
type PackageSection struct {
	Name        string   `toml:"name"`
	Edition     string   `toml:"edition"`
	Version     string   `toml:"version"`
	Description string   `toml:"description"`
	Include     []string `toml:"include"`
	Exclude     []string `toml:"exclude"`
}

// Profile is the [profile] section.
type Profile struct {
	Entries   []string `toml:"entries"`
	Selectors []string `toml:"selectors"`
	Overrides []string `toml:"overrides"`
	Arguments []string `toml:"arguments"`
}

// Dependency is one entry of [dependencies]. Exactly one of Path, OCI, Git is set, or none of
// them for the short form (`k8s = "1.31.2"`, or a table with only version/package), which means
// the default registry.
type Dependency struct {
	// Name is the key in kcl.mod.
	Name string
	// Package is the package's own name when the key is an alias (`package = "..."`), else Name.
	Package string
	// Version is the short form's version, or `version = "..."`.
	Version string
	Path    string
	OCI     *OCISource
	Git     *GitSource
}

// OCISource is `{ oci = "oci://host/repo", tag = "..." }` or `{ repo = "...", reg = "..." }`.
type OCISource struct {
	Registry   string // empty: the default registry
	Repository string
	Tag        string
	Digest     string // from oci://host/repo@sha256:...
}

// GitSource is `{ git = "url", tag | commit | branch = "..." }`.
type GitSource struct {
	URL    string
	Tag    string
	Commit string
	Branch string
	// Package names a package inside the repository (a directory whose kcl.mod has that name).
	Package string
}

// ImportName is the name programs import the dependency by: the key with '-' replaced by '_'.
func (d Dependency) ImportName() string { return strings.ReplaceAll(d.Name, "-", "_") }

// Ref is the version reference of a remote dependency: OCI tag or digest, Git tag, commit or
// branch, or the short form's version.
func (d Dependency) Ref() string {
	switch {
	case d.OCI != nil:
		if d.OCI.Tag != "" {
			return d.OCI.Tag
		}
		if d.OCI.Digest != "" {
			return d.OCI.Digest
		}
		return d.Version
	case d.Git != nil:
		for _, r := range []string{d.Git.Tag, d.Git.Commit, d.Git.Branch} {
			if r != "" {
				return r
			}
		}
		return ""
	}
	return d.Version
}

// IsLocal reports whether the dependency is a local path.
func (d Dependency) IsLocal() bool { return d.Path != "" }

var depNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// ParseModFile reads dir/kcl.mod.
func ParseModFile(dir string) (*ModFile, error) {
	return parseModFile(dir, filepath.Join(dir, ModFileName))
}

// parseModFile reads dir/kcl.mod, naming it shown in errors.
func parseModFile(dir, shown string) (*ModFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, ModFileName))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", shown, errors.Unwrap(err))
	}
	m, err := ParseMod(b)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", shown, err)
	}
	return m, nil
}

// ParseMod parses the content of a kcl.mod.
func ParseMod(b []byte) (*ModFile, error) {
	var raw struct {
		Package      PackageSection `toml:"package"`
		Profile      Profile        `toml:"profile"`
		Dependencies map[string]any `toml:"dependencies"`
	}
	if _, err := toml.Decode(string(b), &raw); err != nil {
		return nil, err
	}
	m := &ModFile{Package: raw.Package, Profile: raw.Profile}
	names := make([]string, 0, len(raw.Dependencies))
	for n := range raw.Dependencies {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d, err := parseDependency(n, raw.Dependencies[n])
		if err != nil {
			return nil, fmt.Errorf("dependency %q: %w", n, err)
		}
		m.Dependencies = append(m.Dependencies, d)
	}
	return m, nil
}

func parseDependency(name string, v any) (Dependency, error) {
	if !depNameRE.MatchString(name) {
		return Dependency{}, errors.New("invalid dependency name")
	}
	d := Dependency{Name: name, Package: name}
	switch v := v.(type) {
	case string:
		d.Version = v
		return d, nil
	case map[string]any:
		f, err := stringFields(v, "path", "git", "oci", "repo", "reg", "tag", "commit", "branch", "version", "package")
		if err != nil {
			return Dependency{}, err
		}
		return tableDependency(d, f)
	default:
		return Dependency{}, fmt.Errorf("expected a version string or a table, got %T", v)
	}
}

// stringFields returns the values of keys in t, "" for those missing; other keys are ignored.
func stringFields(t map[string]any, keys ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range keys {
		x, ok := t[k]
		if !ok {
			out[k] = ""
			continue
		}
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("%s must be a string", k)
		}
		out[k] = s
	}
	return out, nil
}

// tableDependency completes d from the fields of its inline table. The source is the first of
// path (first, as in kpm), git, oci and repo that is set; none means the default registry.
func tableDependency(d Dependency, f map[string]string) (Dependency, error) {
	d.Version = f["version"]
	if f["package"] != "" {
		if !depNameRE.MatchString(f["package"]) {
			return Dependency{}, fmt.Errorf("invalid package name %q", f["package"])
		}
		d.Package = f["package"]
	}
	switch {
	case f["path"] != "":
		d.Path = f["path"]
	case f["git"] != "":
		g := &GitSource{URL: f["git"], Tag: f["tag"], Commit: f["commit"], Branch: f["branch"], Package: f["package"]}
		n := 0
		for _, r := range []string{g.Tag, g.Commit, g.Branch} {
			if r != "" {
				n++
			}
		}
		if n > 1 {
			return Dependency{}, errors.New("only one of tag, commit or branch is allowed")
		}
		// a Git dependency's package names a package inside the repository, not an alias
		d.Git, d.Package = g, d.Name
	case f["oci"] != "":
		o, err := parseOCIURL(f["oci"])
		if err != nil {
			return Dependency{}, err
		}
		if f["tag"] != "" {
			o.Tag = f["tag"]
		}
		d.OCI = o
	case f["repo"] != "":
		d.OCI = &OCISource{Registry: f["reg"], Repository: strings.Trim(f["repo"], "/"), Tag: f["tag"]}
	}
	return d, nil
}

// parseOCIURL parses oci://host/repo[:tag|@digest][?tag=...].
func parseOCIURL(s string) (*OCISource, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("invalid oci URL %q: %w", redactURL(s), err)
	}
	if u.Scheme != "oci" || u.Host == "" {
		return nil, fmt.Errorf("invalid oci URL %q: want oci://host/repository", redactURL(s))
	}
	o := &OCISource{Registry: u.Host, Repository: strings.Trim(u.Path, "/"), Tag: u.Query().Get("tag")}
	if i := strings.Index(o.Repository, "@"); i >= 0 {
		o.Digest = o.Repository[i+1:]
		o.Repository = o.Repository[:i]
	} else if i := strings.LastIndex(o.Repository, ":"); i >= 0 && !strings.Contains(o.Repository[i:], "/") {
		if o.Tag == "" {
			o.Tag = o.Repository[i+1:]
		}
		o.Repository = o.Repository[:i]
	}
	if o.Repository == "" {
		return nil, fmt.Errorf("invalid oci URL %q: no repository", redactURL(s))
	}
	return o, nil
}

// LockFile is a parsed kcl.mod.lock.
type LockFile struct {
	Dependencies map[string]LockedDependency `toml:"dependencies"`
}

// LockedDependency is one [dependencies.<name>] table of kcl.mod.lock.
type LockedDependency struct {
	Name     string `toml:"name"`
	FullName string `toml:"full_name"`
	Version  string `toml:"version"`
	Sum      string `toml:"sum"`
	// OCI
	Reg    string `toml:"reg"`
	Repo   string `toml:"repo"`
	OCITag string `toml:"oci_tag"`
	// Git
	URL     string `toml:"url"`
	Branch  string `toml:"branch"`
	Commit  string `toml:"commit"`
	GitTag  string `toml:"git_tag"`
	Tag     string `toml:"tag"` // older kpm
	Package string `toml:"package"`
	// Local
	Path string `toml:"path"`
}

// refs lists the references the entry was locked at.
func (l LockedDependency) refs() []string {
	var out []string
	for _, r := range []string{l.OCITag, l.GitTag, l.Tag, l.Commit, l.Branch, l.Version} {
		if r != "" {
			out = append(out, r)
		}
	}
	return out
}

// ParseLockFile reads dir/kcl.mod.lock; a missing file is an empty lock.
func ParseLockFile(dir string) (*LockFile, error) {
	return parseLockFile(dir, filepath.Join(dir, LockFileName))
}

func parseLockFile(dir, shown string) (*LockFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, LockFileName))
	if errors.Is(err, os.ErrNotExist) {
		return &LockFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", shown, errors.Unwrap(err))
	}
	var l LockFile
	if _, err := toml.Decode(string(b), &l); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", shown, err)
	}
	return &l, nil
}
