package fstree

import "testing"

func TestWithin(t *testing.T) {
	for _, c := range []struct {
		root, p string
		want    bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b/", "/a/b", true},
		{"/a/b", "/a/b/c/d", true},
		{"/a/b", "/a/b/c/../d", true},
		{"/a/b", "/a/b/..c", true}, // a name that starts with two dots stays inside
		{"/a/b", "/a/bc", false},   // a sibling that shares the prefix is outside
		{"/a/b", "/a", false},
		{"/a/b", "/a/b/../c", false},
		{"/a/b", "/", false},
		{"/a/b", "a/b", false}, // relative against absolute cannot be compared
	} {
		if got := Within(c.root, c.p); got != c.want {
			t.Errorf("Within(%q, %q) = %v, want %v", c.root, c.p, got, c.want)
		}
	}
}
