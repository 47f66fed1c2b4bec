package kclmod

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Names from kcl.mod are checked before any request: a registry or Git server is sent only
// names its specification allows, never "..", empty segments or a query smuggled into a path.
var (
	// the OCI distribution specification's repository name and tag grammar
	ociRepoRE   = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)
	ociTagRE    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	ociDigestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$|^sha512:[a-f0-9]{128}$`)
	hostPortRE  = regexp.MustCompile(`^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]{1,5})?$`)
	commitRE    = regexp.MustCompile(`^[0-9a-fA-F]{4,40}$`)
)

// checkOCIName refuses a registry, repository, tag or digest the OCI specification does not allow.
func checkOCIName(o *ociRef) error {
	switch {
	case !hostPortRE.MatchString(o.Registry):
		return fmt.Errorf("invalid registry %q", o.Registry)
	case len(o.Repository) > 255 || !ociRepoRE.MatchString(o.Repository):
		return fmt.Errorf("invalid repository %q: path components of lower-case letters and digits separated by '.', '_' or '-', no '..' or empty components", o.Repository)
	case o.Tag != "" && !ociTagRE.MatchString(o.Tag):
		return fmt.Errorf("invalid tag %q", o.Tag)
	case o.Digest != "" && !ociDigestRE.MatchString(o.Digest):
		return fmt.Errorf("invalid digest %q", o.Digest)
	}
	return nil
}

// checkGitName refuses a Git URL path with "." or ".." or empty segments, and references git
// itself would refuse (git check-ref-format).
func checkGitName(u *url.URL, g GitSource) error {
	segs := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	for i, s := range segs {
		unescaped, err := url.PathUnescape(s)
		if err != nil || unescaped == "." || unescaped == ".." || strings.ContainsAny(unescaped, "/\\") ||
			(s == "" && i != len(segs)-1) || (s == "" && len(segs) == 1) {
			return fmt.Errorf("invalid Git URL %q: empty, '.' or '..' path segments", redactURL(u.String()))
		}
	}
	if g.Commit != "" && !commitRE.MatchString(g.Commit) {
		return fmt.Errorf("invalid commit %q", g.Commit)
	}
	for kind, ref := range map[string]string{"branch": g.Branch, "tag": g.Tag} {
		if ref != "" && !validRefName(ref) {
			return fmt.Errorf("invalid %s %q", kind, ref)
		}
	}
	return nil
}

// validRefName follows git check-ref-format for a branch or tag name.
func validRefName(s string) bool {
	if len(s) > 255 || s == "@" || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") ||
		strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".") || strings.HasSuffix(s, ".lock") ||
		strings.Contains(s, "..") || strings.Contains(s, "//") || strings.Contains(s, "@{") ||
		strings.ContainsAny(s, " ~^:?*[\\\x7f") {
		return false
	}
	for _, c := range s {
		if c < 0x20 {
			return false
		}
	}
	for _, seg := range strings.Split(s, "/") {
		if strings.HasPrefix(seg, ".") {
			return false
		}
	}
	return true
}
