package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kubenode"
	"github.com/kcl-flux/kcl-artifact-controller/test/nodeinstall"
)

const (
	demoNS          = "demo"
	controllerImage = "ghcr.io/kcl-flux/kcl-artifact-controller:dev"
)

type demoState struct {
	Namespace string `json:"namespace"`
	Kubectl   string `json:"kubectl"`
	GitURL    string `json:"gitURL"`
	YAMLPath  string `json:"yamlPath"` // on the artifact server
}

// demoObjects is what a user applies: a GitRepository and a KCLArtifact whose Kustomization
// waits for the application's rollout.
const demoObjects = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: demo-app
  namespace: demo
spec:
  interval: 10s
  url: GITURL
  ref:
    branch: main
---
apiVersion: kcl.contrib.fluxcd.io/v1alpha1
kind: KCLArtifact
metadata:
  name: demo-app
  namespace: demo
spec:
  interval: 10m
  sourceRef:
    kind: GitRepository
    name: demo-app
  path: ./
  settings: [kcl.yaml]
  kustomization:
    targetNamespace: demo
    wait: true
    timeout: 3m
`

// startDemo installs Flux and this controller on the node and deploys fixtures/node-app through
// them. The returned stop closes the Git server.
func startDemo(ctx context.Context, p paths, node *kubenode.Node) (*demoState, func(), error) {
	tars, _ := filepath.Glob(filepath.Join(p.bin, "images", "*.tar"))
	if len(tars) == 0 {
		return nil, nil, fmt.Errorf("no images in %s/images (make image)", p.bin)
	}
	for _, t := range tars {
		if err := node.ImportImage(ctx, t); err != nil {
			return nil, nil, err
		}
	}
	kubectl := filepath.Join(p.bin, "node", "kubectl")
	inst := &nodeinstall.Installer{Kubectl: kubectl, Kubeconfig: node.KubeconfigPath, RepoRoot: p.root,
		WorkDir: filepath.Join(node.DataDir, "install"), Logf: log.Printf}
	versions, err := nodeinstall.BuiltFluxVersions(p.root)
	if err != nil {
		return nil, nil, err
	}
	if err := inst.Flux(ctx, versions); err != nil {
		return nil, nil, err
	}
	if err := inst.Controller(ctx, controllerImage); err != nil {
		return nil, nil, err
	}
	// the node enforces Flux's NetworkPolicies: without config/flux-system's, the controller
	// fetches no source from source-controller
	if err := inst.FluxSystemPolicies(ctx); err != nil {
		return nil, nil, err
	}
	ln, err := node.Listen("tcp", kubenode.NodeIP+":0")
	if err != nil {
		return nil, nil, err
	}
	gitDir := filepath.Join(node.DataDir, "git")
	git, err := fluxenv.ServeGit(ln, filepath.Join(gitDir, "repos"), filepath.Join(gitDir, "work"),
		filepath.Join(node.LogDir, "git.log"))
	if err != nil {
		return nil, nil, err
	}
	stop := func() { _ = git.Close() }
	if _, err := git.CreateRepo("demo-app", filepath.Join(p.root, "fixtures", "node-app")); err != nil {
		return nil, stop, err
	}
	objects := strings.ReplaceAll(demoObjects, "GITURL", git.URL("demo-app"))
	if _, err := inst.Apply(ctx, objects); err != nil {
		return nil, stop, err
	}
	log.Printf("demo: waiting for the KCLArtifact to be rendered, applied and healthy")
	if _, err := inst.Run(ctx, "-n", demoNS, "wait", "kclartifact/demo-app", "--for=condition=KustomizationReady",
		"--timeout=5m"); err != nil {
		return nil, stop, err
	}
	// the artifact server answers only with the token the published URL carries
	artifactURL, err := inst.Run(ctx, "-n", demoNS, "get", "kclartifact/demo-app", "-o", "jsonpath={.status.artifact.url}")
	if err != nil {
		return nil, stop, err
	}
	yamlURL, err := url.Parse(artifactstore.Sibling(strings.TrimSpace(artifactURL), "latest.yaml"))
	if err != nil {
		return nil, stop, err
	}
	return &demoState{Namespace: demoNS, Kubectl: kubectl, GitURL: git.URL("demo-app"),
		YAMLPath: yamlURL.RequestURI()}, stop, nil
}

// reportDemo asks the application through `kubectl port-forward`, as a user would, and prints
// its answer and how to go on.
func reportDemo(p paths, st *state) error {
	d := st.Demo
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.Kubectl, "--kubeconfig", st.Kubeconfig, "-n", d.Namespace,
		"port-forward", "svc/demo-app", ":80")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var local string
	sc := bufio.NewScanner(out)
	for sc.Scan() { // "Forwarding from 127.0.0.1:PORT -> 8080"
		if f := strings.Fields(sc.Text()); len(f) >= 3 && strings.HasPrefix(f[2], "127.0.0.1:") {
			local = f[2]
			break
		}
	}
	if local == "" {
		return fmt.Errorf("kubectl port-forward printed no local address")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	resp, err := http.Get("http://" + local + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	kc := d.Kubectl + " --kubeconfig " + st.Kubeconfig // the kubectl of the node's version
	fmt.Printf(`
The demo application, rendered from fixtures/node-app by the KCLArtifact demo/demo-app and
applied by Flux, answers through kubectl port-forward (http://%s/):

    %s

  %s -n demo get gitrepositories,kclartifacts,externalartifacts,kustomizations,pods
  %s -n demo port-forward svc/demo-app 8080:80      # then: curl http://127.0.0.1:8080/
  change the message: edit kcl.yaml in a clone of %s (from inside the node), or
  %s -n demo patch kclartifact demo-app --type merge -p '{"spec":{"arguments":{"message":"hi"}}}'
  the rendered YAML: %s -n kcl-system port-forward svc/kcl-artifact-controller 9090:80
      then: curl 'http://127.0.0.1:9090%s'
  make demo-node-down stops everything.
`, local, strings.TrimSpace(string(body)), kc, kc, d.GitURL, kc, kc, d.YAMLPath)
	return nil
}
