package render

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// ModFile is the name of a KCL package manifest.
const ModFile = "kcl.mod"

// kclMod is the part of kcl.mod that selects the program's entry files.
type kclMod struct {
	Profile struct {
		Entries []string `toml:"entries"`
	} `toml:"profile"`
}

// absPath makes p absolute against dir, leaving kcl's ${KCL_MOD} references to the engine.
func absPath(dir, p string) string {
	if filepath.IsAbs(p) || strings.HasPrefix(p, "${") {
		return p
	}
	return filepath.Join(dir, p)
}

// expandInputs turns inputs into the file list kcl compiles: a directory stands for its kcl.mod
// [profile] entries, or else its own .k files (tests excluded), as `kcl run DIR` does.
func expandInputs(c *confiner, field, dir string, inputs []string) ([]string, error) {
	var files []string
	for _, in := range inputs {
		p, err := c.path(field, dir, in)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(p)
		if err != nil {
			if strings.HasPrefix(p, "${") {
				files = append(files, p)
				continue
			}
			return nil, fmt.Errorf("cannot find the kcl file %q: %w", in, errors.Unwrap(err))
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		pkg, err := packageFiles(c, p)
		if err != nil {
			return nil, err
		}
		files = append(files, pkg...)
	}
	return files, nil
}

func packageFiles(c *confiner, dir string) ([]string, error) {
	entries, err := profileEntries(c, dir)
	if err != nil || len(entries) > 0 {
		return entries, err
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, de := range des {
		n := de.Name()
		if !de.IsDir() && strings.HasSuffix(n, ".k") && !strings.HasSuffix(n, "_test.k") {
			files = append(files, filepath.Join(dir, n))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no KCL files in %s (and no [profile] entries in its kcl.mod)", dir)
	}
	sort.Strings(files)
	return files, nil
}

func profileEntries(c *confiner, dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ModFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m kclMod
	if err := toml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, ModFile), err)
	}
	entries := make([]string, 0, len(m.Profile.Entries))
	pc := *c
	pc.modRoot = dir
	for _, e := range m.Profile.Entries {
		p, err := pc.path("kcl.mod [profile] entries", dir, e)
		if err != nil {
			return nil, err
		}
		entries = append(entries, p)
	}
	return entries, nil
}
