package kclmod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

var fullCommitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// gitURL checks and normalises a Git dependency URL: http and https only (git:// is cloned over
// https, as kpm does); local files and other transports are refused.
func gitURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid Git URL %q", redactURL(raw))
	}
	if u.Scheme == "git" {
		u.Scheme = "https"
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("unsupported Git URL %q: only http and https are supported", redactURL(raw))
	}
	if u.User != nil {
		return nil, fmt.Errorf("Git URL %q has credentials in it: give them as Git credentials instead", redactURL(raw))
	}
	return u, nil
}

// fetchGit returns the pinned cache entry of the repository at the dependency's reference. The
// remote is always asked (ls-remote) with the caller's credentials, which resolves tags and
// branches and checks the caller may read the repository; the entry is keyed by the URL and the
// commit, so that a commit cached for one repository is not served for another.
func (r *Resolver) fetchGit(ctx context.Context, g GitSource, creds Credentials) (*entry, bool, error) {
	u, err := r.gitRemote(g.URL)
	if err != nil {
		return nil, false, err
	}
	if err := checkGitName(u, g); err != nil {
		return nil, false, err
	}
	ctx, cg := r.net.withCall(ctx)
	release, err := cg.trustCAs(creds.gitCAs())
	if err != nil {
		return nil, false, err
	}
	defer release()
	auth, hasAuth := creds.gitAuthFor(u)
	gc := gitCall{u: u, hasAuth: hasAuth, withheld: creds.gitAuthWithheld(u), guard: cg}
	rawURL := u.String()
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{rawURL}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: auth, PeelingOption: git.AppendPeeled})
	if err != nil {
		return nil, false, gc.fail("listing the references", err)
	}
	refName, commit, err := pickCommit(refs, g, rawURL)
	if err != nil {
		return nil, false, err
	}

	// a short commit id is only known once the repository is cloned
	var preclone string
	if !fullCommitRE.MatchString(commit) {
		tmp, err := os.MkdirTemp(filepath.Join(r.cache.root, "tmp"), "git-clone-")
		if err != nil {
			return nil, false, err
		}
		defer os.RemoveAll(tmp)
		full, err := r.cloneAt(ctx, rawURL, auth, "", commit, filepath.Join(tmp, "pkg"))
		if err != nil {
			return nil, false, gc.fail("cloning", err)
		}
		commit, preclone = full, filepath.Join(tmp, "pkg")
	}

	e, downloaded, err := r.gitEntry(ctx, gc, auth, refName, commit, preclone)
	// resolving a short commit id cloned the repository even when the entry was cached
	return e, downloaded || preclone != "", err
}

// gitEntry returns the cache entry of the repository at commit, filling it from preclone (a
// clone made to learn the full commit id) or else by cloning refName.
func (r *Resolver) gitEntry(ctx context.Context, gc gitCall, auth transport.AuthMethod, refName plumbing.ReferenceName, commit, preclone string) (*entry, bool, error) {
	rawURL := gc.u.String()
	urlHash := sha256.Sum256([]byte(rawURL))
	key := "git-" + hex.EncodeToString(urlHash[:8]) + "-" + commit
	return r.cache.get(ctx, key, func(dir string) (entryMeta, error) {
		pkg := filepath.Join(dir, "pkg")
		if preclone != "" {
			if err := os.Rename(preclone, pkg); err != nil {
				return entryMeta{}, err
			}
		} else if _, err := r.cloneAt(ctx, rawURL, auth, refName, commit, pkg); err != nil {
			return entryMeta{}, gc.fail("cloning", err)
		}
		if err := checkTree(pkg, r.opts.MaxPackageBytes, r.opts.MaxPackageFiles); err != nil {
			return entryMeta{}, err
		}
		return entryMeta{Source: redactURL(rawURL) + "@" + commit, Digest: commit}, nil
	})
}

// gitRemote checks a Git dependency's URL, and that it may be fetched from.
func (r *Resolver) gitRemote(raw string) (*url.URL, error) {
	u, err := gitURL(raw)
	if err != nil {
		return nil, err
	}
	if !r.net.policy.hostAllowed(u.Host) {
		return nil, fmt.Errorf("%w: %s is not one of the allowed hosts", ErrHostNotAllowed, u.Host)
	}
	if err := checkGitTransport(u.Scheme); err != nil {
		return nil, err
	}
	return u, nil
}

// pickCommit finds the commit the dependency asks for among the remote's references, and the
// reference to fetch it by ("" for a commit given by id, which may be short).
func pickCommit(refs []*plumbing.Reference, g GitSource, rawURL string) (plumbing.ReferenceName, string, error) {
	byName := map[string]*plumbing.Reference{}
	for _, ref := range refs {
		byName[ref.Name().String()] = ref
	}
	switch {
	case g.Commit != "":
		return "", strings.ToLower(g.Commit), nil
	case g.Tag != "":
		refName := plumbing.NewTagReferenceName(g.Tag)
		// an annotated tag's peeled entry is its commit
		if p, ok := byName[refName.String()+"^{}"]; ok {
			return refName, p.Hash().String(), nil
		}
		if t, ok := byName[refName.String()]; ok {
			return refName, t.Hash().String(), nil
		}
		return "", "", fmt.Errorf("no tag %q in %s", g.Tag, redactURL(rawURL))
	case g.Branch != "":
		refName := plumbing.NewBranchReferenceName(g.Branch)
		b, ok := byName[refName.String()]
		if !ok {
			return "", "", fmt.Errorf("no branch %q in %s", g.Branch, redactURL(rawURL))
		}
		return refName, b.Hash().String(), nil
	}
	var refName plumbing.ReferenceName
	head, ok := byName[plumbing.HEAD.String()]
	if ok && head.Type() == plumbing.SymbolicReference {
		refName = head.Target()
		head, ok = byName[refName.String()]
	}
	if !ok || head.Type() != plumbing.HashReference {
		return "", "", fmt.Errorf("cannot find the default branch of %s", redactURL(rawURL))
	}
	return refName, head.Hash().String(), nil
}

// cloneAt clones rawURL into dir at commit (a full or short id) and removes .git. With refName
// set (a tag or branch pointing at commit) only that reference is fetched, shallowly. The
// commit's tree is checked against the bounds before anything is checked out: a small pack can
// hold a tree that repeats one subtree many times over.
func (r *Resolver) cloneAt(ctx context.Context, rawURL string, auth transport.AuthMethod, refName plumbing.ReferenceName, commit, dir string) (string, error) {
	opts := &git.CloneOptions{URL: rawURL, Auth: auth, Tags: git.NoTags, NoCheckout: true}
	if refName != "" {
		opts.ReferenceName, opts.SingleBranch, opts.Depth = refName, true, 1
	}
	repo, err := git.PlainCloneContext(ctx, dir, false, opts)
	if err != nil {
		return "", err
	}
	hash, err := clonedCommit(repo, refName, commit)
	if err != nil {
		return "", err
	}
	if err := checkCommitTree(repo, hash, r.opts.MaxPackageBytes, r.opts.MaxPackageFiles); err != nil {
		return "", err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: hash, Force: true}); err != nil {
		return "", fmt.Errorf("checking out %s: %w", commit, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, ".git")); err != nil {
		return "", err
	}
	return hash.String(), nil
}

// clonedCommit is the commit to check out: the fetched reference's, which must still be commit,
// or commit itself.
func clonedCommit(repo *git.Repository, refName plumbing.ReferenceName, commit string) (plumbing.Hash, error) {
	if refName != "" {
		head, err := repo.Head()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if head.Hash().String() != commit {
			return plumbing.ZeroHash, fmt.Errorf("%s moved to %s while fetching it, expected %s", refName.Short(), head.Hash(), commit)
		}
		return head.Hash(), nil
	}
	h, err := repo.ResolveRevision(plumbing.Revision(commit))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("commit %s: %w", commit, err)
	}
	return *h, nil
}

// checkCommitTree counts the entries of the commit's tree (files, directories, symlinks and
// submodules) and the sizes of its files, stopping at the first past the bounds.
func checkCommitTree(repo *git.Repository, hash plumbing.Hash, maxBytes int64, maxEntries int) error {
	c, err := repo.CommitObject(hash)
	if err != nil {
		return err
	}
	tree, err := c.Tree()
	if err != nil {
		return err
	}
	w := object.NewTreeWalker(tree, true, nil)
	defer w.Close()
	var total int64
	for entries := 1; ; entries++ {
		_, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if entries > maxEntries {
			return fmt.Errorf("the package has more than %d files and directories", maxEntries)
		}
		if !e.Mode.IsFile() {
			continue
		}
		n, err := repo.Storer.EncodedObjectSize(e.Hash)
		if err != nil {
			return err
		}
		if total += n; total > maxBytes {
			return fmt.Errorf("the package is larger than %d bytes", maxBytes)
		}
	}
}

// gitCall is what a Git failure is explained with.
type gitCall struct {
	u                 *url.URL
	hasAuth, withheld bool
	guard             *callGuard
}

// fail explains a Git failure without credentials in it, and without anything a host the guard
// refused would tell.
func (gc gitCall) fail(doing string, err error) error {
	u := gc.u
	where := redactURL(u.String())
	if na := gc.guard.notAllowed(u.Host, err); na != nil {
		return fmt.Errorf("%s %s: %w", doing, where, na)
	}
	if be := gc.guard.boundBroken(); be != nil {
		return fmt.Errorf("%s %s: %w", doing, where, be)
	}
	if code := gitHTTPStatus(err); code != 0 {
		return fmt.Errorf("%s %s: the server answered HTTP %d", doing, where, code)
	}
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired):
		if gc.hasAuth {
			return fmt.Errorf("%s %s: the server refused the credentials given for %s", doing, where, u.Host)
		}
		if gc.withheld {
			return fmt.Errorf("%s %s: authentication required; the credentials for %s are only sent over https unless marked insecure", doing, where, u.Host)
		}
		return fmt.Errorf("%s %s: authentication required and no credentials were given for %s", doing, where, u.Host)
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return fmt.Errorf("%s %s: authorization failed for the credentials given for %s", doing, where, u.Host)
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return fmt.Errorf("%s %s: repository not found", doing, where)
	}
	return fmt.Errorf("%s %s: %w", doing, where, err)
}

// gitHTTPStatus is the status of an unexpected HTTP answer go-git failed on, or 0. go-git's
// UnexpectedError does not unwrap.
func gitHTTPStatus(err error) int {
	var ue *plumbing.UnexpectedError
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var he *githttp.Err
	if errors.As(err, &he) && he.Response != nil {
		return he.Response.StatusCode
	}
	return 0
}
