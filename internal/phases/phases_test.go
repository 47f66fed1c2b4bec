package phases

import "testing"

func TestOf(t *testing.T) {
	for _, c := range []struct {
		annotations map[string]string
		phase       Phase
		skip        bool
		err         bool
	}{
		{nil, Main, false, false},
		{map[string]string{Annotation: "pre"}, Pre, false, false},
		{map[string]string{Annotation: " post "}, Post, false, false},
		{map[string]string{Annotation: "main"}, Main, false, false},
		{map[string]string{Annotation: "before"}, "", false, true},
		// this controller's annotation wins over a hook
		{map[string]string{Annotation: "main", HelmHook: "pre-install"}, Main, false, false},
		{map[string]string{HelmHook: "pre-install,pre-upgrade"}, Pre, false, false},
		{map[string]string{HelmHook: "pre-upgrade"}, Pre, false, false},
		{map[string]string{HelmHook: "post-install, post-upgrade"}, Post, false, false},
		{map[string]string{HelmHook: "pre-delete"}, "", true, false},
		{map[string]string{HelmHook: "test"}, "", true, false},
		// a hook that also runs on install is run
		{map[string]string{HelmHook: "pre-delete,post-install"}, Post, false, false},
		// unknown values are ignored
		{map[string]string{HelmHook: "crd-install"}, Main, false, false},
		{map[string]string{ArgoHook: "PreSync"}, Pre, false, false},
		{map[string]string{ArgoHook: "Sync"}, Main, false, false},
		{map[string]string{ArgoHook: "PostSync"}, Post, false, false},
		{map[string]string{ArgoHook: "Skip"}, "", true, false},
		{map[string]string{ArgoHook: "SyncFail"}, "", true, false},
		{map[string]string{ArgoHook: "PreSync,SyncFail"}, Pre, false, false},
		{map[string]string{ArgoHook: "presync"}, Main, false, false},
	} {
		p, skip, err := Of(c.annotations)
		if (err != nil) != c.err || p != c.phase || skip != c.skip {
			t.Errorf("Of(%v) = %q, skip %v, error %v; want %q, skip %v, error %v", c.annotations, p, skip, err, c.phase, c.skip, c.err)
		}
	}
}

func TestPlace(t *testing.T) {
	for _, c := range []struct {
		annotations map[string]string
		want        Placement
	}{
		{nil, Placement{Main, Main}},
		// this controller's annotation and Argo CD's hooks place an object alike in a rollback
		{map[string]string{Annotation: "pre"}, Placement{Pre, Pre}},
		{map[string]string{ArgoHook: "PostSync"}, Placement{Post, Post}},
		// Helm's run on the event they name
		{map[string]string{HelmHook: "pre-install,pre-upgrade"}, Placement{Pre, ""}},
		{map[string]string{HelmHook: "pre-rollback"}, Placement{"", Pre}},
		{map[string]string{HelmHook: "post-rollback"}, Placement{"", Post}},
		{map[string]string{HelmHook: "pre-upgrade, pre-rollback"}, Placement{Pre, Pre}},
		{map[string]string{HelmHook: "post-upgrade,pre-rollback"}, Placement{Post, Pre}},
		{map[string]string{HelmHook: "pre-delete,test"}, Placement{}},
		{map[string]string{HelmHook: "crd-install"}, Placement{Main, Main}},
	} {
		got, err := Place(c.annotations)
		if err != nil || got != c.want {
			t.Errorf("Place(%v) = %+v, %v; want %+v", c.annotations, got, err, c.want)
		}
	}
	if p, skip, _ := Of(map[string]string{HelmHook: "pre-rollback"}); !skip || p != "" {
		t.Errorf("a rollback hook is not deployed: Of = %q, skip %v", p, skip)
	}
}
