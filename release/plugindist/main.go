// Command plugindist writes the release archives of the flux-kcl plugin and the Flux plugin
// catalog files for them, in the format flux v2.9.5 reads (cli.fluxcd.io/v1beta1):
//
//	go run ./release/plugindist --version v0.1.0 [--out dist] [--template plugins/kcl.yaml]
//	    [--platforms linux/amd64,darwin/arm64] [--url-base https://host/path/] [--license Apache-2.0]
//
// For each platform it builds ./cmd/flux-kcl with CGO_ENABLED=0, -trimpath and the version stamp
// of `make build`, and writes <out>/flux-kcl_<version>_<os>_<arch>.tar.gz holding flux-kcl
// (mode 0755). Then <out>/kcl.yaml: the template with this version first in `versions` (each
// archive's URL and sha256), and <out>/catalog.yaml: a PluginCatalog with the plugin's entry.
// The catalog version is --version without its leading "v" (flux prints "v" before it).
//
// An archive's URL is --url-base followed by its name; by default the GitHub release of the
// template's `source` for the tag v<version>. Archives are reproducible (fixed tar headers, no
// gzip name or time), so a release's checksums can be checked by building it again.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// The catalog types of flux v2.9.5 (pkg/plugin/types.go), with the same field names and order.
type manifest struct {
	APIVersion  string    `yaml:"apiVersion"`
	Kind        string    `yaml:"kind"`
	Name        string    `yaml:"name"`
	Description string    `yaml:"description"`
	Homepage    string    `yaml:"homepage,omitempty"`
	Source      string    `yaml:"source,omitempty"`
	Bin         string    `yaml:"bin"`
	Versions    []version `yaml:"versions"`
}

type version struct {
	Version   string     `yaml:"version"`
	Platforms []platform `yaml:"platforms"`
}

type platform struct {
	OS          string `yaml:"os"`
	Arch        string `yaml:"arch"`
	URL         string `yaml:"url"`
	Checksum    string `yaml:"checksum"`
	ExtractPath string `yaml:"extractPath,omitempty"`
}

type catalog struct {
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Plugins    []catalogEntry `yaml:"plugins"`
}

type catalogEntry struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Homepage    string `yaml:"homepage"`
	Source      string `yaml:"source"`
	License     string `yaml:"license"`
}

const (
	apiVersion = "cli.fluxcd.io/v1beta1"
	versionVar = "github.com/kcl-flux/kcl-artifact-controller/internal/version.Version"
)

type options struct {
	version, out, template, urlBase, license string
	platforms                                []string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "plugindist:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	m, err := readTemplate(o.template)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	catalogVersion := strings.TrimPrefix(o.version, "v")
	if o.urlBase == "" {
		o.urlBase = fmt.Sprintf("%s/releases/download/v%s/", strings.TrimSuffix(m.Source, "/"), catalogVersion)
	}
	v := version{Version: catalogVersion}
	for _, p := range o.platforms {
		pl, err := dist(o, m.Bin, catalogVersion, p)
		if err != nil {
			return err
		}
		v.Platforms = append(v.Platforms, pl)
	}
	m.Versions = prepend(m.Versions, v)
	if err := writeYAML(filepath.Join(o.out, m.Name+".yaml"), m); err != nil {
		return err
	}
	return writeYAML(filepath.Join(o.out, "catalog.yaml"), catalog{APIVersion: apiVersion, Kind: "PluginCatalog",
		Plugins: []catalogEntry{{m.Name, m.Description, m.Homepage, m.Source, o.license}}})
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("plugindist", pflag.ContinueOnError)
	fs.StringVar(&o.version, "version", "", "version stamped into flux-kcl (make's VERSION); required")
	fs.StringVar(&o.out, "out", "dist", "output directory")
	fs.StringVar(&o.template, "template", "plugins/kcl.yaml", "the plugin manifest kept in the repository")
	fs.StringVar(&o.urlBase, "url-base", "", "URL the archives are downloaded from, ending in /; default: the GitHub release of the template's source")
	fs.StringVar(&o.license, "license", "Apache-2.0", "SPDX license of the catalog entry")
	fs.StringSliceVar(&o.platforms, "platforms", []string{runtime.GOOS + "/" + runtime.GOARCH}, "os/arch pairs to build")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.version == "" || fs.NArg() > 0 {
		return o, fmt.Errorf("usage: go run ./release/plugindist --version <version> [flags]\n%s", fs.FlagUsages())
	}
	return o, nil
}

// readTemplate reads the manifest strictly: a misspelt field would be dropped by flux's decoder.
func readTemplate(path string) (manifest, error) {
	var m manifest
	f, err := os.Open(path)
	if err != nil {
		return m, err
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	if m.APIVersion != apiVersion || m.Kind != "Plugin" || !strings.HasPrefix(m.Bin, "flux-") || m.Name == "" {
		return m, fmt.Errorf("%s: want apiVersion %s, kind Plugin, a name and a bin named flux-<name>", path, apiVersion)
	}
	return m, nil
}

// prepend puts v first (newest first, as flux expects), replacing an entry of the same version.
func prepend(vs []version, v version) []version {
	out := []version{v}
	for _, old := range vs {
		if old.Version != v.Version {
			out = append(out, old)
		}
	}
	return out
}

// dist builds the plugin for one os/arch and archives it; it returns the catalog's platform entry.
func dist(o options, bin, catalogVersion, osArch string) (platform, error) {
	goos, goarch, ok := strings.Cut(osArch, "/")
	if !ok || goos == "windows" {
		return platform{}, fmt.Errorf("platform %q: want <os>/<arch>, not windows (flux wants a .zip and %s.exe there)", osArch, bin)
	}
	tmp, err := os.MkdirTemp("", "plugindist-")
	if err != nil {
		return platform{}, err
	}
	defer os.RemoveAll(tmp)
	binary := filepath.Join(tmp, bin)
	if err := build(binary, goos, goarch, o.version); err != nil {
		return platform{}, err
	}
	name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", bin, catalogVersion, goos, goarch)
	sum, err := archive(filepath.Join(o.out, name), binary)
	if err != nil {
		return platform{}, err
	}
	fmt.Printf("%s  sha256:%s\n", filepath.Join(o.out, name), sum)
	return platform{OS: goos, Arch: goarch, URL: o.urlBase + name, Checksum: "sha256:" + sum}, nil
}

func build(out, goos, goarch, version string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X "+versionVar+"="+version, "-o", out, "./cmd/flux-kcl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building flux-kcl for %s/%s: %w", goos, goarch, err)
	}
	return nil
}

// archive writes a tar.gz holding binary under its base name and returns its sha256 in hex.
// The headers carry no time, owner or name of this machine, so the bytes depend on the binary only.
func archive(path, binary string) (string, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return "", err
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.Base(binary), Mode: 0o755, Size: int64(len(data)), Format: tar.FormatUSTAR}
	err = tw.WriteHeader(hdr)
	if err == nil {
		_, err = tw.Write(data)
	}
	for _, c := range []io.Closer{tw, gz, f} {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeYAML writes v with the two-space indent of the fluxcd/plugins files.
func writeYAML(path string, v any) error {
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
