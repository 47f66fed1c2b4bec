package kclmod

import (
	"fmt"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

func storeObject(t *testing.T, repo *git.Repository, o interface {
	Encode(plumbing.EncodedObject) error
}) plumbing.Hash {
	t.Helper()
	obj := repo.Storer.NewEncodedObject()
	if err := o.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := repo.Storer.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A commit whose tree repeats one subtree 16 times on each of 5 levels: a few objects, but
// 16^5 (a million) files once checked out. The tree is refused from its objects, walking only
// as far as the bound.
func TestGitTreeBombRefusedBeforeCheckout(t *testing.T) {
	repo, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		t.Fatal(err)
	}
	blob := repo.Storer.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	blobHash, err := repo.Storer.SetEncodedObject(blob)
	if err != nil {
		t.Fatal(err)
	}
	hash, mode := blobHash, filemode.Regular
	for range 5 {
		var tree object.Tree
		for i := range 16 {
			tree.Entries = append(tree.Entries, object.TreeEntry{Name: fmt.Sprintf("e%02d", i), Mode: mode, Hash: hash})
		}
		hash, mode = storeObject(t, repo, &tree), filemode.Dir
	}
	sig := object.Signature{Name: "t", Email: "t@example.invalid"}
	commit := storeObject(t, repo, &object.Commit{Author: sig, Committer: sig, Message: "bomb", TreeHash: hash})

	err = checkCommitTree(repo, commit, 1<<30, 1000)
	if err == nil || !strings.Contains(err.Error(), "more than 1000 files and directories") {
		t.Fatalf("want the entry bound, got %v", err)
	}
	// the count is exact: the tree's own number of entries passes
	if err := checkCommitTree(repo, commit, 1<<30, 16*16*16*16*16+16*16*16*16+16*16*16+16*16+16); err != nil {
		t.Fatalf("the whole tree within its exact count: %v", err)
	}
}
