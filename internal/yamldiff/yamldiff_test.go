package yamldiff

import (
	"strings"
	"testing"
)

const cm = `apiVersion: v1
kind: ConfigMap
metadata: {name: app, namespace: ns}
data: {greeting: hello, env: prod}
`

const svc = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns}
spec: {ports: [{port: 80}]}
`

func TestDiff(t *testing.T) {
	for _, tc := range []struct {
		name          string
		from, to      string
		summary       string
		contains      []string
		notContaining []string
	}{
		{
			name: "reordered objects and keys are no change", from: cm + "---\n" + svc,
			to: "kind: Service\napiVersion: v1\nspec: {ports: [{port: 80}]}\nmetadata: {namespace: ns, name: web}\n---\n" +
				"data: {env: prod, greeting: hello}\nmetadata: {name: app, namespace: ns}\nkind: ConfigMap\napiVersion: v1\n",
			summary: "0 added, 0 removed, 0 changed, 2 unchanged",
		},
		{
			name: "a changed value is one field line", from: cm, to: strings.Replace(cm, "greeting: hello", "greeting: hi", 1),
			summary:  "0 added, 0 removed, 1 changed, 0 unchanged",
			contains: []string{"--- a/ConfigMap/ns/app\n", "+++ b/ConfigMap/ns/app\n", "-  greeting: hello\n", "+  greeting: hi\n", "   env: prod\n"},
		},
		{
			name: "added and removed objects, sorted", from: svc, to: cm,
			summary:  "1 added, 1 removed, 0 changed, 0 unchanged",
			contains: []string{"--- /dev/null\n+++ b/ConfigMap/ns/app\n", "--- a/Service/ns/web\n+++ /dev/null\n"},
		},
		{
			name:    "a new API version of the same group is a change, not a replacement",
			from:    "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
			to:      "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
			summary: "0 added, 0 removed, 1 changed, 0 unchanged", contains: []string{"-apiVersion: autoscaling/v1\n", "+apiVersion: autoscaling/v2\n"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Diff([]byte(tc.from), []byte(tc.to), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Summary() != tc.summary {
				t.Errorf("summary %q, want %q\n%s", r.Summary(), tc.summary, r)
			}
			for _, s := range tc.contains {
				if !strings.Contains(r.String(), s) {
					t.Errorf("the diff lacks %q:\n%s", s, r)
				}
			}
		})
	}
}

const secret = `apiVersion: v1
kind: Secret
metadata: {name: db, namespace: ns}
data: {password: aHVudGVyMg==, user: YWRtaW4=}
stringData: {token: s3cr3t-token}
`

func TestSecretsAreMasked(t *testing.T) {
	changed := strings.NewReplacer("aHVudGVyMg==", "bmV3LXBhc3N3b3Jk", "s3cr3t-token", "an0ther-token").Replace(secret) +
		"---\napiVersion: v1\nkind: Secret\nmetadata: {name: new, namespace: ns}\nstringData: {key: brand-new-value}\n"
	r, err := Diff([]byte(secret), []byte(changed), Options{})
	if err != nil {
		t.Fatal(err)
	}
	out := r.String()
	for _, v := range []string{"aHVudGVyMg==", "bmV3LXBhc3N3b3Jk", "YWRtaW4=", "s3cr3t-token", "an0ther-token", "brand-new-value"} {
		if strings.Contains(out, v) {
			t.Errorf("the diff shows the Secret value %q:\n%s", v, out)
		}
	}
	for _, s := range []string{"-  password: '***'\n", "+  password: '*** (changed)'\n", "   user: '***'\n", "+  token: '*** (changed)'\n", "+  key: '***'\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("the masked diff lacks %q:\n%s", s, out)
		}
	}
	if r.Summary() != "1 added, 0 removed, 1 changed, 0 unchanged" {
		t.Errorf("summary %q", r.Summary())
	}

	shown, err := Diff([]byte(secret), []byte(changed), Options{ShowSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shown.String(), "+  password: bmV3LXBhc3N3b3Jk\n") {
		t.Errorf("ShowSecrets hides the value:\n%s", shown)
	}
}

// A Secret whose values did not change is no change, masked or not.
func TestUnchangedSecretIsUnchanged(t *testing.T) {
	r, err := Diff([]byte(secret), []byte(secret), Options{})
	if err != nil || r.Summary() != "0 added, 0 removed, 0 changed, 1 unchanged" {
		t.Fatalf("%v %s", err, r.Summary())
	}
}

func TestMaskLeavesTheOriginalAlone(t *testing.T) {
	objs, err := parse([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	m := Mask(objs[0])
	if m.Object["data"].(map[string]any)["password"] != MaskedValue || objs[0].Object["data"].(map[string]any)["password"] != "aHVudGVyMg==" {
		t.Fatalf("masked %v, original %v", m.Object["data"], objs[0].Object["data"])
	}
}

func TestInvalidInputIsAnError(t *testing.T) {
	if _, err := Diff([]byte("kind: [unclosed"), []byte(cm), Options{}); err == nil || !strings.Contains(err.Error(), "older") {
		t.Fatalf("want an error about the older objects, got %v", err)
	}
}

// A reviewer sees each object's deploy phase in the headers, and an object that moved phase.
func TestDiffShowsPhases(t *testing.T) {
	from := `apiVersion: batch/v1
kind: Job
metadata: {name: migrate, annotations: {kcl.contrib.fluxcd.io/phase: pre}}
spec: {backoffLimit: 1}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, annotations: {helm.sh/hook: pre-install}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: plain}
data: {a: "1"}
`
	to := `apiVersion: batch/v1
kind: Job
metadata: {name: migrate, annotations: {kcl.contrib.fluxcd.io/phase: pre}}
spec: {backoffLimit: 2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: plain}
data: {a: "2"}
`
	res, err := Diff([]byte(from), []byte(to), Options{})
	if err != nil {
		t.Fatal(err)
	}
	phase := map[string]string{}
	for _, o := range res.Objects {
		phase[o.Name] = o.Phase
	}
	if phase["migrate"] != "pre" || phase["settings"] != "pre -> main" || phase["plain"] != "" {
		t.Fatalf("phases %v", phase)
	}
	out := res.String()
	for _, want := range []string{"--- a/Job/migrate\tphase pre\n+++ b/Job/migrate\tphase pre\n",
		"--- a/ConfigMap/settings\tphase pre\n+++ b/ConfigMap/settings\tphase main\n",
		"--- a/ConfigMap/plain\n+++ b/ConfigMap/plain\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the diff lacks %q:\n%s", want, out)
		}
	}
}

// TestUnlistedAgreesWithTheDiff: without the text, the same objects are found changed, added,
// removed and unchanged, in the same order and phases.
func TestUnlistedAgreesWithTheDiff(t *testing.T) {
	reordered := "kind: Service\napiVersion: v1\nspec: {ports: [{port: 80}]}\nmetadata: {namespace: ns, name: web}\n"
	for _, pair := range [][2]string{
		{cm + "---\n" + svc, reordered + "---\n" + cm},
		{cm, strings.Replace(cm, "greeting: hello", "greeting: hi", 1)},
		{svc, cm},
		{secret, strings.Replace(secret, "aHVudGVyMg==", "aHVudGVyMw==", 1)},
		{secret + "---\n" + cm, secret + "---\n" + svc},
		{"apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n",
			"apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n"},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s, annotations: {helm.sh/hook: pre-install}}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\n"},
	} {
		full, err := Diff([]byte(pair[0]), []byte(pair[1]), Options{})
		if err != nil {
			t.Fatal(err)
		}
		short, err := Diff([]byte(pair[0]), []byte(pair[1]), Options{Unlisted: true})
		if err != nil {
			t.Fatal(err)
		}
		if short.Unchanged != full.Unchanged || len(short.Objects) != len(full.Objects) {
			t.Fatalf("unlisted %q, full %q", short.Summary(), full.Summary())
		}
		for i, o := range short.Objects {
			want := full.Objects[i]
			want.Unified = ""
			if o != want {
				t.Errorf("object %d: unlisted %+v, full %+v", i, o, want)
			}
		}
	}
}

// A value from a Secret is masked wherever a program put it: a ConfigMap's data, a label, an
// annotation, a command line, base64-encoded, as a number; values too short to be secrets are
// left alone, and ShowSecrets shows everything.
func TestSensitiveValuesMaskedWherever(t *testing.T) {
	from := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {v: '1'}\n")
	to := []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  labels: {copied: TOPSECRET-pw-42}
  annotations: {copied: "pw: TOPSECRET-pw-42", b64: VE9QU0VDUkVULXB3LTQy}
data: {v: '1', x: TOPSECRET-pw-42, port: "5432", short: ab}
---
apiVersion: batch/v1
kind: Job
metadata: {name: leak}
spec: {template: {spec: {containers: [{name: c, command: [sh, -c, "echo --password=TOPSECRET-pw-42"], ports: [{containerPort: 5432}]}]}}}
`)
	res, err := Diff(from, to, Options{Sensitive: []string{"TOPSECRET-pw-42", "5432", "ab"}})
	if err != nil {
		t.Fatal(err)
	}
	all := res.Markdown()
	for _, o := range res.Objects {
		all += o.Unified
	}
	for _, leaked := range []string{"TOPSECRET", "VE9QU0VDUkVULXB3LTQy", "5432"} {
		if strings.Contains(all, leaked) {
			t.Fatalf("%s shows:\n%s", leaked, all)
		}
	}
	if !strings.Contains(all, "short: ab") || !strings.Contains(all, "containerPort: '***'") && !strings.Contains(all, `containerPort: "***"`) {
		t.Fatalf("masking went too far or not far enough:\n%s", all)
	}
	shown, _ := Diff(from, to, Options{Sensitive: []string{"TOPSECRET-pw-42"}, ShowSecrets: true})
	if !strings.Contains(shown.Objects[0].Unified+shown.Objects[1].Unified, "TOPSECRET-pw-42") {
		t.Fatal("ShowSecrets does not show the value")
	}
}
