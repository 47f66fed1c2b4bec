// Package sourcecache keeps source artifacts unpacked, one tree per namespace and digest, so that
// the KCLArtifacts of a namespace rendering one source revision download, verify and unpack it
// once. The trees live in the namespace's staging directory (staging.Area.Sources): confined
// renders of that namespace read them in place (Use), and cannot write them; unconfined renders
// get copies of their own (Stage).
package sourcecache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/apis/meta"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
)

// FetchFunc downloads, verifies and unpacks an artifact into dir.
type FetchFunc func(ctx context.Context, a *meta.Artifact, dir string) error

// Options configure a Cache.
type Options struct {
	// DirFor is the directory of a namespace's trees, created; renders of that namespace, and
	// no other, may read it. Emptying it at start is the caller's (staging.New does).
	DirFor func(namespace string) (string, error)
	// MaxBytes bounds the unpacked trees kept (unused ones beyond it go, oldest first).
	MaxBytes int64
	// MaxAge evicts a tree unused for this long.
	MaxAge time.Duration
	// Copy stages copies instead of hard links.
	Copy bool
	// Fetch fills a tree.
	Fetch FetchFunc
	// Observe, if set, is told whether each Stage was served from the cache.
	Observe func(hit bool)
}

// Defaults of Options.
const (
	DefaultMaxBytes = 1 << 30
	DefaultMaxAge   = 10 * time.Minute
)

// Cache is safe for concurrent use.
type Cache struct {
	opts    Options
	mu      sync.Mutex
	entries map[string]*entry // by digest
	size    int64
}

type entry struct {
	key      string
	dir      string
	ready    chan struct{} // closed once filled (or failed)
	err      error
	size     int64
	users    int
	lastUsed time.Time
}

// New returns a cache over opts.DirFor.
func New(opts Options) (*Cache, error) {
	if opts.Fetch == nil || opts.DirFor == nil {
		return nil, errors.New("sourcecache: DirFor and Fetch are required")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	return &Cache{opts: opts, entries: map[string]*entry{}}, nil
}

// Use returns the unpacked tree of artifact a for the renders of namespace, to be read in place
// until release is called; it is downloaded only if no tree of that namespace and digest is
// cached. The namespace is part of the key: a digest alone is not a capability, or a tenant who
// learnt another tenant's digest could claim it in a source of their own and be served that
// tenant's files from the cache. A failed download is not cached.
func (c *Cache) Use(ctx context.Context, namespace string, a *meta.Artifact) (dir string, release func(), err error) {
	if a.Digest == "" {
		return "", nil, fmt.Errorf("artifact %s has no digest", a.Revision)
	}
	e, hit, err := c.acquire(ctx, namespace, a)
	if err != nil {
		return "", nil, err
	}
	if c.opts.Observe != nil {
		c.opts.Observe(hit)
	}
	var once sync.Once
	return e.dir, func() { once.Do(func() { c.release(e) }) }, nil
}

// Stage puts a copy (Options.Copy) or hard links of what Use returns into dst, which must not
// exist or be empty: for renders that could write to what they read.
func (c *Cache) Stage(ctx context.Context, namespace string, a *meta.Artifact, dst string) error {
	dir, release, err := c.Use(ctx, namespace, a)
	if err != nil {
		return err
	}
	defer release()
	if err := fstree.Link(dir, dst, c.opts.Copy); err != nil {
		return fmt.Errorf("staging the source: %w", err)
	}
	return nil
}

// Copies tells whether renders are to get copies (Stage) rather than read the trees in place.
func (c *Cache) Copies() bool { return c.opts.Copy }

// acquire returns the entry of a's digest in namespace with a use counted, filling it if
// needed: concurrent callers for one digest wait for a single download.
func (c *Cache) acquire(ctx context.Context, namespace string, a *meta.Artifact) (*entry, bool, error) {
	root, err := c.opts.DirFor(namespace)
	if err != nil {
		return nil, false, err
	}
	key := namespace + "/" + a.Digest
	c.mu.Lock()
	c.expire(time.Now())
	e, hit := c.entries[key]
	if !hit {
		e = &entry{key: key, dir: filepath.Join(root, dirName(a.Digest)), ready: make(chan struct{})}
		c.entries[key] = e
		go c.fill(e, a)
	}
	e.users++
	c.mu.Unlock()

	select {
	case <-e.ready:
	case <-ctx.Done():
		c.release(e)
		return nil, false, ctx.Err()
	}
	if e.err != nil {
		c.release(e)
		return nil, false, e.err
	}
	return e, hit, nil
}

// fill runs apart from any one caller's context: a caller that gives up must not fail the
// others waiting for the same tree. The fetcher's own retries and size bounds limit it.
func (c *Cache) fill(e *entry, a *meta.Artifact) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := e.dir + ".tmp"
	err := os.RemoveAll(tmp)
	if err == nil {
		err = c.opts.Fetch(ctx, a, tmp)
	}
	var size int64
	if err == nil {
		size, err = fstree.Size(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, e.dir)
	}
	c.mu.Lock()
	if err != nil {
		_ = os.RemoveAll(tmp)
		e.err = err
		delete(c.entries, e.key)
	} else {
		e.size = size
		c.size += size
	}
	c.mu.Unlock()
	close(e.ready)
}

func (c *Cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.users--
	e.lastUsed = time.Now()
	c.expire(e.lastUsed)
}

// expire removes unused trees older than MaxAge, then the least recently used unused ones while
// over MaxBytes. c.mu is held.
func (c *Cache) expire(now time.Time) {
	for {
		var oldest *entry
		for _, e := range c.entries {
			if e.users > 0 || !isClosed(e.ready) || e.err != nil {
				continue
			}
			if oldest == nil || e.lastUsed.Before(oldest.lastUsed) {
				oldest = e
			}
		}
		if oldest == nil || (c.size <= c.opts.MaxBytes && now.Sub(oldest.lastUsed) < c.opts.MaxAge) {
			return
		}
		delete(c.entries, oldest.key)
		c.size -= oldest.size
		// copies staged from it stay; a tree in use is never the oldest unused one
		_ = os.RemoveAll(oldest.dir)
	}
}

// Len is the number of trees cached or being filled.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// dirName makes a digest ("sha256:…") a file name.
func dirName(key string) string { return strings.NewReplacer("/", "_", ":", "-").Replace(key) }
