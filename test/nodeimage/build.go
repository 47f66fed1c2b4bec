package nodeimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// formatVersion is part of every cache key: bump it when the way images are written changes, so
// tarballs written by an older version of this package are not taken as up to date.
const formatVersion = "nodeimage/1"

// IndexFile lists the tarballs of an output directory for the node's loader: one line per image,
// "<ref> <tar file, relative to the index> <image ID>", sorted by ref.
const IndexFile = "index.txt"

// Result is a written image tarball. It is also the stamp kept beside the tarball.
type Result struct {
	Name   string `json:"name"`
	Ref    string `json:"ref"`
	Tar    string `json:"tar"`    // file name in the output directory
	ID     string `json:"id"`     // config digest: the image ID crictl/ctr show after the import
	Digest string `json:"digest"` // manifest digest in the tarball (ctr import writes its own manifest)
	Size   int64  `json:"size"`   // of the tarball
	Inputs string `json:"inputs"` // cache key: format, ref, configuration, layer contents
	Cached bool   `json:"-"`      // the tarball was up to date and not written again
}

// Options of Build.
type Options struct {
	OutDir string
	Epoch  time.Time // every mtime and the created time; zero: DefaultEpoch
}

// DefaultEpoch is $SOURCE_DATE_EPOCH (the reproducible-builds convention) or 1970-01-01.
func DefaultEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// Build writes spec as <OutDir>/<Name>.tar, a docker-archive `ctr images import` accepts, unless
// the tarball there was written from the same inputs (the stamp <Name>.stamp says). Before
// writing, every ELF file of the image must find its loader and libraries in the image.
func Build(spec Spec, opts Options) (Result, error) {
	if opts.Epoch.IsZero() {
		var err error
		if opts.Epoch, err = DefaultEpoch(); err != nil {
			return Result{}, err
		}
	}
	layers, err := layerTars(spec, opts.Epoch)
	if err != nil {
		return Result{}, err
	}
	inputs, err := inputsDigest(spec, opts.Epoch, layers)
	if err != nil {
		return Result{}, err
	}
	if r, ok := upToDate(opts.OutDir, spec.Name, inputs); ok {
		return r, nil
	}
	if err := checkLibraries(spec.Name, layers); err != nil {
		return Result{}, err
	}
	img, err := image(spec, opts.Epoch, layers)
	if err != nil {
		return Result{}, err
	}
	return write(spec, img, opts.OutDir, inputs)
}

func layerTars(spec Spec, epoch time.Time) ([][]byte, error) {
	out := make([][]byte, len(spec.Layers))
	for i, l := range spec.Layers {
		var err error
		if out[i], err = layerTar(l.Entries, epoch); err != nil {
			return nil, fmt.Errorf("%s: layer %q: %w", spec.Name, l.Name, err)
		}
	}
	return out, nil
}

// SpecRootFS is the file system of spec's layers, without building the image.
func SpecRootFS(spec Spec) (*RootFS, error) {
	layers, err := layerTars(spec, time.Unix(0, 0))
	if err != nil {
		return nil, err
	}
	return rootFSOf(layers)
}

func rootFSOf(layers [][]byte) (*RootFS, error) {
	readers := make([]io.Reader, len(layers))
	for i, l := range layers {
		readers[i] = bytes.NewReader(l)
	}
	return ReadRootFS(readers...)
}

func checkLibraries(name string, layers [][]byte) error {
	fs, err := rootFSOf(layers)
	if err != nil {
		return err
	}
	if missing := fs.MissingLibraries(); len(missing) > 0 {
		return fmt.Errorf("%s: not loadable in the image, missing:\n  %s", name, strings.Join(missing, "\n  "))
	}
	return nil
}

// baseConfig is the image configuration before the layers are appended (mutate adds the diffIDs
// and the history entries).
func baseConfig(spec Spec, epoch time.Time) *v1.ConfigFile {
	c := spec.Config
	return &v1.ConfigFile{
		Architecture: runtime.GOARCH, // the binaries are built on this machine
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env,
			WorkingDir: c.WorkingDir, Labels: c.Labels,
		},
	}
}

func history(l Layer, epoch time.Time) v1.History {
	return v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "nodeimage: " + l.Name}
}

// image assembles the image from the layer tarballs (gzip-compressed once, when written).
func image(spec Spec, epoch time.Time, layers [][]byte) (v1.Image, error) {
	img, err := mutate.ConfigFile(empty.Image, baseConfig(spec, epoch))
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(layers))
	for i, data := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithCompressedCaching)
		if err != nil {
			return nil, err
		}
		adds[i] = mutate.Addendum{Layer: l, History: history(spec.Layers[i], epoch)}
	}
	return mutate.Append(img, adds...)
}

// inputsDigest is the cache key: everything the image is made of, without compressing anything.
func inputsDigest(spec Spec, epoch time.Time, layers [][]byte) (string, error) {
	h := sha256.New()
	cfg, err := json.Marshal(baseConfig(spec, epoch))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "%s\n%s\n%s\n", formatVersion, spec.Ref, cfg)
	for i, l := range layers {
		hist, err := json.Marshal(history(spec.Layers[i], epoch))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%x %s\n", sha256.Sum256(l), hist)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func stampPath(outDir, name string) string { return filepath.Join(outDir, name+".stamp") }

// upToDate returns the stamp of name if it has these inputs and its tarball is there, whole.
func upToDate(outDir, name, inputs string) (Result, bool) {
	r, err := readStamp(stampPath(outDir, name))
	if err != nil || r.Inputs != inputs {
		return Result{}, false
	}
	fi, err := os.Stat(filepath.Join(outDir, r.Tar))
	if err != nil || fi.Size() != r.Size {
		return Result{}, false
	}
	r.Cached = true
	return r, true
}

func readStamp(p string) (Result, error) {
	var r Result
	data, err := os.ReadFile(p)
	if err == nil {
		err = json.Unmarshal(data, &r)
	}
	return r, err
}

// write writes the tarball (through a temporary file, so an interrupted build leaves no tarball
// that looks whole), then its stamp.
func write(spec Spec, img v1.Image, outDir, inputs string) (Result, error) {
	tag, err := name.NewTag(spec.Ref, name.StrictValidation)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", spec.Name, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Result{}, err
	}
	r := Result{Name: spec.Name, Ref: spec.Ref, Tar: spec.Name + ".tar", Inputs: inputs}
	tarPath := filepath.Join(outDir, r.Tar)
	if err := tarball.WriteToFile(tarPath+".tmp", tag, img); err != nil {
		return Result{}, fmt.Errorf("%s: %w", spec.Name, err)
	}
	if err := os.Rename(tarPath+".tmp", tarPath); err != nil {
		return Result{}, err
	}
	if err := describe(&r, img, tarPath); err != nil {
		return Result{}, err
	}
	stamp, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return Result{}, err
	}
	return r, os.WriteFile(stampPath(outDir, spec.Name), append(stamp, '\n'), 0o644)
}

func describe(r *Result, img v1.Image, tarPath string) error {
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fi, err := os.Stat(tarPath)
	if err != nil {
		return err
	}
	r.ID, r.Digest, r.Size = id.String(), digest.String(), fi.Size()
	return nil
}

// WriteIndex writes IndexFile from the stamps in outDir whose tarball is there, so it lists the
// images of earlier runs too, and returns them.
func WriteIndex(outDir string) ([]Result, error) {
	stamps, err := filepath.Glob(filepath.Join(outDir, "*.stamp"))
	if err != nil {
		return nil, err
	}
	var rs []Result
	for _, s := range stamps {
		r, err := readStamp(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		if _, err := os.Stat(filepath.Join(outDir, r.Tar)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Ref < rs[j].Ref })
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s %s %s\n", r.Ref, r.Tar, r.ID)
	}
	return rs, os.WriteFile(filepath.Join(outDir, IndexFile), []byte(b.String()), 0o644)
}
