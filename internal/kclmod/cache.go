package kclmod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fluxcd/pkg/lockedfile"
)

// The cache directory:
//
//	entries/<key>/meta.json   what the entry is; its mtime is the entry's last use (LRU)
//	entries/<key>/pkg/        the package (OCI) or the repository worktree (Git)
//	pins/<key>                held with a shared flock by every caller using the entry
//	locks/<key>               held exclusively (lockedfile) while the entry is being filled
//	tmp/                      entries being filled, renamed into entries/ when complete
//	trash/                    evicted entries being removed
//	evict.lock                held while evicting
//
// Keys are "oci-<hash of registry/repository>-<manifest digest hex>" and
// "git-<hash of the URL>-<commit>".
type cache struct {
	root string
	max  int64

	mu   sync.Mutex
	keys map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{}
	refs int
}

type entryMeta struct {
	Key    string `json:"key"`
	Source string `json:"source"`
	// Digest is the OCI manifest digest or the Git commit.
	Digest string `json:"digest"`
	// Sum is Checksum of pkg/.
	Sum string `json:"sum"`
	// ManifestSum is the org.kcllang.package.sum annotation of an OCI package.
	ManifestSum string `json:"manifestSum,omitempty"`
	// LayerDigest is the package layer of an OCI package.
	LayerDigest string `json:"layerDigest,omitempty"`
	// Private marks a package fetched with credentials: a later caller must be confirmed by the
	// registry before it is served from here.
	Private bool      `json:"private,omitempty"`
	Size    int64     `json:"size"`
	Files   int       `json:"files"`
	Created time.Time `json:"created"`
}

// entry is a cache entry held (pinned) by a caller until release.
type entry struct {
	dir  string // entries/<key>
	meta entryMeta
	pin  *os.File
}

func (e *entry) pkgDir() string { return filepath.Join(e.dir, "pkg") }

func newCache(root string, max int64) (*cache, error) {
	for _, d := range []string{"entries", "pins", "locks", "tmp", "trash"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	c := &cache{root: root, max: max, keys: map[string]*keyLock{}}
	c.cleanLeftovers()
	return c, nil
}

// cleanLeftovers removes what crashed processes left behind: old temporary directories and
// evicted entries not yet removed.
func (c *cache) cleanLeftovers() {
	for _, d := range []string{"tmp", "trash"} {
		des, _ := os.ReadDir(filepath.Join(c.root, d))
		for _, de := range des {
			info, err := de.Info()
			if err == nil && (d == "trash" || time.Since(info.ModTime()) > time.Hour) {
				_ = os.RemoveAll(filepath.Join(c.root, d, de.Name()))
			}
		}
	}
}

// pinEntry takes a shared lock on pins/<key>: while it is held, the entry is not evicted.
func (c *cache) pinEntry(key string) (*os.File, error) {
	p := filepath.Join(c.root, "pins", key)
	for {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		if err := flockShared(f); err != nil {
			f.Close()
			return nil, err
		}
		// an eviction may have removed the file while we waited for it
		if sameFile(f, p) {
			return f, nil
		}
		f.Close()
	}
}

// lockKey serialises the filling of one key, in this process (a channel, so that waiting can be
// cancelled) and across processes (a lock file).
func (c *cache) lockKey(ctx context.Context, key string) (func(), error) {
	c.mu.Lock()
	kl := c.keys[key]
	if kl == nil {
		kl = &keyLock{ch: make(chan struct{}, 1)}
		c.keys[key] = kl
	}
	kl.refs++
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		kl.refs--
		if kl.refs == 0 {
			delete(c.keys, key)
		}
		c.mu.Unlock()
	}
	select {
	case kl.ch <- struct{}{}:
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
	unlockFile, err := lockedfile.MutexAt(filepath.Join(c.root, "locks", key)).Lock()
	if err != nil {
		<-kl.ch
		done()
		return nil, err
	}
	return func() {
		unlockFile()
		<-kl.ch
		done()
	}, nil
}

func (c *cache) readMeta(key string) (entryMeta, error) {
	var m entryMeta
	b, err := os.ReadFile(filepath.Join(c.root, "entries", key, "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, err
	}
	if m.Key != key {
		return m, fmt.Errorf("cache entry %s: meta names %s", key, m.Key)
	}
	return m, nil
}

// get returns the pinned entry for key, calling fill to create it when it is not cached; fill
// writes the package into dir/pkg and returns the entry's Source, Digest and ManifestSum.
// downloaded reports whether fill ran.
func (c *cache) get(ctx context.Context, key string, fill func(dir string) (entryMeta, error)) (e *entry, downloaded bool, err error) {
	pin, err := c.pinEntry(key)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if err != nil {
			pin.Close()
		}
	}()
	unlock, err := c.lockKey(ctx, key)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	dir := filepath.Join(c.root, "entries", key)
	if m, err := c.readMeta(key); err == nil {
		now := time.Now()
		_ = os.Chtimes(filepath.Join(dir, "meta.json"), now, now)
		return &entry{dir: dir, meta: m, pin: pin}, false, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(c.root, "tmp"), key+"-")
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	m, err := fill(tmp)
	if err != nil {
		return nil, false, err
	}
	m.Key = key
	m.Created = time.Now().UTC()
	m.Size, m.Files, err = dirSize(filepath.Join(tmp, "pkg"))
	if err != nil {
		return nil, false, err
	}
	if m.Sum, err = Checksum(filepath.Join(tmp, "pkg")); err != nil {
		return nil, false, err
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, false, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), b, 0o644); err != nil {
		return nil, false, err
	}
	// an incomplete entry (no meta.json) can only be the remains of a crash
	if _, err := os.Stat(dir); err == nil {
		if err := os.Rename(dir, filepath.Join(c.root, "trash", key+"-"+randSuffix())); err != nil {
			return nil, false, err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, false, err
	}
	return &entry{dir: dir, meta: m, pin: pin}, true, nil
}

func dirSize(dir string) (size int64, files int, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
			files++
		}
		return nil
	})
	return size, files, err
}

// usage lists the complete entries, least recently used first, and their total size.
func (c *cache) usage() ([]cacheEntryInfo, int64) {
	des, _ := os.ReadDir(filepath.Join(c.root, "entries"))
	var out []cacheEntryInfo
	var total int64
	for _, de := range des {
		m, err := c.readMeta(de.Name())
		if err != nil {
			continue
		}
		info, err := os.Stat(filepath.Join(c.root, "entries", de.Name(), "meta.json"))
		if err != nil {
			continue
		}
		out = append(out, cacheEntryInfo{Key: m.Key, Size: m.Size, LastUsed: info.ModTime()})
		total += m.Size
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LastUsed.Equal(out[j].LastUsed) {
			return out[i].LastUsed.Before(out[j].LastUsed)
		}
		return out[i].Key < out[j].Key
	})
	return out, total
}

type cacheEntryInfo struct {
	Key      string
	Size     int64
	LastUsed time.Time
}

// evict removes least recently used entries nobody has pinned until the cache is within its
// limit, and returns the keys it removed.
func (c *cache) evict() ([]string, error) {
	if c.max <= 0 {
		return nil, nil
	}
	unlock, err := lockedfile.MutexAt(filepath.Join(c.root, "evict.lock")).Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	entries, total := c.usage()
	var removed []string
	var errs []error
	for _, e := range entries {
		if total <= c.max {
			break
		}
		ok, err := c.evictOne(e.Key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			total -= e.Size
			removed = append(removed, e.Key)
		}
	}
	return removed, errors.Join(errs...)
}

// evictOne removes the entry for key unless somebody has it pinned.
func (c *cache) evictOne(key string) (bool, error) {
	p := filepath.Join(c.root, "pins", key)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false, err
	}
	defer f.Close()
	ok, err := flockTryExclusive(f)
	if err != nil || !ok {
		return false, err
	}
	trash := filepath.Join(c.root, "trash", key+"-"+randSuffix())
	if err := os.Rename(filepath.Join(c.root, "entries", key), trash); err != nil {
		return false, err
	}
	// Waiters on the pin file see it removed and open a new one (pinEntry).
	_ = os.Remove(p)
	_ = os.Remove(filepath.Join(c.root, "locks", key))
	return true, os.RemoveAll(trash)
}

func randSuffix() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}
