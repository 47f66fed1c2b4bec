package arguments

import (
	"maps"
	"strings"
	"testing"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func TestPick(t *testing.T) {
	data := map[string]string{"env": "prod", "replicas": "3", "other": "x"}
	for name, tc := range map[string]struct {
		data    map[string]string
		ref     kclv1.ArgumentsReference
		want    map[string]string
		wantErr string
	}{
		"every key":                 {data, kclv1.ArgumentsReference{Kind: "ConfigMap", Name: "c"}, data, ""},
		"chosen keys":               {data, kclv1.ArgumentsReference{Keys: []string{"env", "replicas"}}, map[string]string{"env": "prod", "replicas": "3"}, ""},
		"a missing key":             {data, kclv1.ArgumentsReference{Kind: "Secret", Name: "s", Keys: []string{"nope"}}, nil, `Secret s has no key "nope"`},
		"a missing optional key":    {data, kclv1.ArgumentsReference{Keys: []string{"env", "nope"}, Optional: true}, map[string]string{"env": "prod"}, ""},
		"a missing optional object": {nil, kclv1.ArgumentsReference{Keys: []string{"env"}, Optional: true}, map[string]string{}, ""},
	} {
		got := map[string]string{}
		err := pick(got, tc.data, tc.ref)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", name, got, err, tc.want)
		}
	}
}
