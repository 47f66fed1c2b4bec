package fluxkcl

import "testing"

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/kcl-flux/kcl-artifact-controller:v1.2.3":                   "v1.2.3",
		"localhost:5000/kcl-artifact-controller:dev":                        "dev",
		"ghcr.io/kcl-flux/kcl-artifact-controller:v1.2.3@sha256:0123456789": "v1.2.3",
		"localhost:5000/kcl-artifact-controller":                            "unknown",
		"ghcr.io/kcl-flux/kcl-artifact-controller@sha256:0123456789":        "unknown",
	} {
		if got := imageTag(image); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestFlagValue(t *testing.T) {
	for _, c := range []struct {
		args       []string
		name, want string
		found      bool
	}{
		{[]string{"run", "--storage-addr=:9090"}, "storage-addr", ":9090", true},
		{[]string{"run", "--ui-addr", "127.0.0.1:1", "--ui-addr=:2"}, "ui-addr", ":2", true}, // the last wins
		{[]string{"run", "--ui-addr="}, "ui-addr", "", true},
		{[]string{"run", "--ui-address=x", "--ui-addr"}, "ui-addr", "", false},
	} {
		if got, found := flagValue(c.args, c.name); got != c.want || found != c.found {
			t.Errorf("flagValue(%q, %s) = %q, %v; want %q, %v", c.args, c.name, got, found, c.want, c.found)
		}
	}
}
