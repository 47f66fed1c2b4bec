// Command filerefs counts the references between the files of one Go package: file A refers to
// file B when A uses a package-level name B declares. Files are laid out in floors, each file
// above every file it refers to; where files refer to each other in a cycle, the references that
// run back up are those from a file to one on a floor above it (the floors of a cycle are those
// of the order in which its files declare fewest names used by the others). It prints the
// floors, every reference that runs back up, and the totals: the count the layout paragraph of
// docs/development.md and the closing notes of redesigns cite.
//
//	go run ./hack/filerefs ./internal/controller
package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: filerefs <package directory>")
		os.Exit(2)
	}
	refs, err := fileRefs(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	floors := layout(refs)
	var files []string
	for f := range floors {
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool {
		if floors[files[i]] != floors[files[j]] {
			return floors[files[i]] > floors[files[j]]
		}
		return files[i] < files[j]
	})
	for _, f := range files {
		fmt.Printf("floor %2d  %s\n", floors[f], f)
	}
	total, up := 0, 0
	for _, a := range files {
		var to []string
		for b := range refs[a] {
			to = append(to, b)
		}
		sort.Strings(to)
		for _, b := range to {
			total++
			if floors[b] >= floors[a] {
				up++
				fmt.Printf("up: %s -> %s\n", a, b)
			}
		}
	}
	fmt.Printf("%d references between %d files, %d run back up\n", total, len(files), up)
}

// fileRefs maps each non-test file of the package in dir to the files whose package-level names
// it uses.
func fileRefs(dir string) (map[string]map[string]bool, error) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo, Dir: dir}
	pkgs, err := packages.Load(cfg, ".")
	if err != nil {
		return nil, err
	}
	if len(pkgs) != 1 || len(pkgs[0].Errors) > 0 {
		return nil, fmt.Errorf("loading %s: %v", dir, pkgs[0].Errors)
	}
	p := pkgs[0]
	refs := map[string]map[string]bool{}
	for _, f := range p.Syntax {
		from := filepath.Base(p.Fset.Position(f.Pos()).Filename)
		refs[from] = map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := p.TypesInfo.Uses[id]
			if obj == nil || obj.Pkg() != p.Types || !declaredAtTop(obj) {
				return true
			}
			to := filepath.Base(p.Fset.Position(obj.Pos()).Filename)
			if to != from && !strings.HasSuffix(to, "_test.go") {
				refs[from][to] = true
			}
			return true
		})
	}
	return refs, nil
}

// declaredAtTop tells whether obj is a package-level name, or a method or field of one.
func declaredAtTop(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		return true
	case *types.Var:
		return o.IsField() || o.Parent() == o.Pkg().Scope()
	}
	return obj.Parent() == obj.Pkg().Scope()
}

// layout gives each file a floor above every file it refers to. A cycle is broken at the
// reference into the file that the rest of its cycle uses least.
func layout(refs map[string]map[string]bool) map[string]int {
	floors := map[string]int{}
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(f string) int
	visit = func(f string) int {
		switch state[f] {
		case 1:
			return -1 // a reference back into the cycle being walked
		case 2:
			return floors[f]
		}
		state[f] = 1
		floor := 1
		var to []string
		for b := range refs[f] {
			to = append(to, b)
		}
		sort.Slice(to, func(i, j int) bool {
			return uses(refs, to[i]) > uses(refs, to[j]) || uses(refs, to[i]) == uses(refs, to[j]) && to[i] < to[j]
		})
		for _, b := range to {
			if fb := visit(b); fb >= 0 && fb+1 > floor {
				floor = fb + 1
			}
		}
		state[f], floors[f] = 2, floor
		return floor
	}
	var files []string
	for f := range refs {
		files = append(files, f)
	}
	// files used most are laid first, low
	sort.Slice(files, func(i, j int) bool {
		return uses(refs, files[i]) > uses(refs, files[j]) || uses(refs, files[i]) == uses(refs, files[j]) && files[i] < files[j]
	})
	for _, f := range files {
		visit(f)
	}
	return floors
}

// uses counts the files that refer to f.
func uses(refs map[string]map[string]bool, f string) int {
	n := 0
	for _, to := range refs {
		if to[f] {
			n++
		}
	}
	return n
}
