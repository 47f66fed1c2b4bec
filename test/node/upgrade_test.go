package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/nodeinstall"
)

// The fleet the upgrade is measured with: KCLArtifacts of fixtures/node-fleet, a few of them
// running a Deployment, all in one namespace from one GitRepository.
const (
	fleetNS          = "fleet"
	fleetSize        = 100
	fleetDeployments = 3
	crdName          = "kclartifacts.kcl.contrib.fluxcd.io"
)

// upgradeRun is what setUp saw while Flux upgraded the previous release to this tree's image.
type upgradeRun struct {
	previousImage    string
	before, after    fleetSnapshot
	crdBefore        *apiextensionsv1.CustomResourceDefinition
	crdAfter         *apiextensionsv1.CustomResourceDefinition
	rolledOut        time.Duration // commit to the new Pod Ready and Flux's health check passed
	servedAgain      time.Duration // commit to every artifact answering with its digest
	fleetApplied     time.Duration // 100 KCLArtifacts created to all applied, on the previous release
	previousPodImage string
	currentPodImage  string
}

// fleetSnapshot is what must not change across the upgrade: every workload object's
// resourceVersion, every Pod's UID, every KCLArtifact's artifact digest and what its
// Kustomization applied.
type fleetSnapshot struct {
	objects   map[string]string // kind/name -> resourceVersion (Pods: UID and resourceVersion)
	digests   map[string]string // KCLArtifact -> status.artifact.digest
	applied   map[string]string // generated Kustomization -> lastAppliedRevision
	artifacts int
}

// upgradeWanted says whether this run includes TestUpgradeByFlux: a run of other tests only
// installs this tree's image at once and saves the fleet's minutes.
func upgradeWanted() bool {
	f := flag.Lookup("test.run")
	if f == nil || f.Value.String() == "" {
		return true
	}
	ok, err := regexp.MatchString(strings.Split(f.Value.String(), "/")[0], "TestUpgradeByFlux")
	return err == nil && ok
}

// previousRelease is what `make previous-release` built: the previous release's config/ and image.
func previousRelease(root string) (configDir, image string, err error) {
	data, err := os.ReadFile(filepath.Join(root, "bin", "previous.env"))
	if err != nil {
		return "", "", fmt.Errorf("%w (run `make previous-release`)", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	if env["PREVIOUS_RELEASE_DIR"] == "" || env["PREVIOUS_RELEASE_IMAGE"] == "" {
		return "", "", fmt.Errorf("bin/previous.env: %q", data)
	}
	return filepath.Join(env["PREVIOUS_RELEASE_DIR"], "config"), env["PREVIOUS_RELEASE_IMAGE"], nil
}

// installByFlux bootstraps the platform repository. With the upgrade wanted it installs the
// previous release, runs the fleet on it and upgrades to this tree's image by a commit;
// otherwise it installs this tree's image at once.
func installByFlux(ctx context.Context, root string) error {
	platform := &nodeinstall.Platform{Git: suite.git, Repo: "platform"}
	if !upgradeWanted() {
		return suite.install.Bootstrap(ctx, platform, filepath.Join(root, "config"), "config/default", controllerImage)
	}
	configDir, image, err := previousRelease(root)
	if err != nil {
		return err
	}
	began := time.Now()
	if err := suite.install.Bootstrap(ctx, platform, configDir, "config/default", image); err != nil {
		return fmt.Errorf("installing the previous release %s by Flux: %w", image, err)
	}
	figure("previous release installed by Flux", time.Since(began))
	run := &upgradeRun{previousImage: image}
	suite.upgrade = run
	if err := runFleet(ctx, run); err != nil {
		return fmt.Errorf("the fleet on the previous release: %w", err)
	}
	return upgrade(ctx, root, run)
}

// upgrade commits this tree's config/ and image to the platform repository and measures until
// every artifact answers again.
func upgrade(ctx context.Context, root string, run *upgradeRun) error {
	var err error
	if run.previousPodImage, err = controllerPodImage(ctx); err != nil {
		return err
	}
	if run.before, err = snapshotFleet(ctx); err != nil {
		return err
	}
	if run.crdBefore, err = getCRD(ctx); err != nil {
		return err
	}
	began := time.Now()
	if _, err := suite.install.UpgradeController(ctx, filepath.Join(root, "config"), controllerImage); err != nil {
		return fmt.Errorf("upgrading to %s by Flux: %w", controllerImage, err)
	}
	run.rolledOut = time.Since(began)
	if err := poll(ctx, 4*time.Minute, "every artifact served again", allArtifactsServed); err != nil {
		return err
	}
	run.servedAgain = time.Since(began)
	figure("upgrade commit to controller rolled out", run.rolledOut)
	figure("upgrade commit to every artifact served", run.servedAgain)
	if run.currentPodImage, err = controllerPodImage(ctx); err != nil {
		return err
	}
	if run.crdAfter, err = getCRD(ctx); err != nil {
		return err
	}
	run.after, err = snapshotFleet(ctx)
	return err
}

// runFleet creates the fleet on the previous release and waits until every KCLArtifact is applied.
func runFleet(ctx context.Context, run *upgradeRun) error {
	if err := createTenantNamespace(ctx, fleetNS); err != nil {
		return err
	}
	if _, err := suite.git.CreateRepo(fleetNS, filepath.Join(suite.repo, "fixtures", "node-fleet")); err != nil {
		return err
	}
	gr := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: fleetNS},
		Spec: sourcev1.GitRepositorySpec{URL: suite.git.URL(fleetNS), Interval: metav1.Duration{Duration: 10 * time.Minute},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch}}}
	if err := suite.client.Create(ctx, gr); err != nil {
		return err
	}
	began := time.Now()
	for i := range fleetSize {
		if err := suite.client.Create(ctx, fleetArtifact(i)); err != nil {
			return err
		}
	}
	if err := poll(ctx, 6*time.Minute, "the fleet applied", fleetApplied); err != nil {
		return err
	}
	run.fleetApplied = time.Since(began)
	figure(fmt.Sprintf("%d KCLArtifacts created to applied", fleetSize), run.fleetApplied)
	return nil
}

func fleetArtifact(i int) *kclv1.KCLArtifact {
	name := fmt.Sprintf("app-%03d", i)
	return kclArtifact(fleetNS, name, fleetNS, func(o *kclv1.KCLArtifact) {
		o.Spec.Interval = metav1.Duration{Duration: time.Hour}
		o.Spec.Arguments = map[string]string{"name": name, "deploy": fmt.Sprint(i < fleetDeployments)}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{Wait: i < fleetDeployments, TargetNamespace: fleetNS,
			Interval: &metav1.Duration{Duration: time.Hour}, Timeout: &metav1.Duration{Duration: 2 * time.Minute}}
	})
}

// fleetApplied holds when every KCLArtifact of the fleet is Ready and applied.
func fleetApplied(ctx context.Context) (bool, string, error) {
	var list kclv1.KCLArtifactList
	if err := suite.client.List(ctx, &list, client.InNamespace(fleetNS)); err != nil {
		return false, "", err
	}
	applied := 0
	var waiting string
	for i := range list.Items {
		obj := &list.Items[i]
		if conditions.IsReady(obj) && conditions.IsTrue(obj, kclv1.KustomizationReadyCondition) {
			applied++
		} else if waiting == "" {
			waiting = obj.Name + ": " + kclState(obj)
		}
	}
	return applied == fleetSize, fmt.Sprintf("%d of %d applied; %s", applied, fleetSize, waiting), nil
}

func snapshotFleet(ctx context.Context) (fleetSnapshot, error) {
	s := fleetSnapshot{objects: map[string]string{}, digests: map[string]string{}, applied: map[string]string{}}
	lists := map[string]client.ObjectList{"ConfigMap": &corev1.ConfigMapList{}, "Deployment": &appsv1.DeploymentList{},
		"ReplicaSet": &appsv1.ReplicaSetList{}, "Pod": &corev1.PodList{}}
	for kind, list := range lists {
		if err := suite.client.List(ctx, list, client.InNamespace(fleetNS)); err != nil {
			return s, err
		}
		objs, err := metaOf(list)
		if err != nil {
			return s, err
		}
		for _, o := range objs {
			if kind == "ConfigMap" && o.GetName() == "kube-root-ca.crt" {
				continue
			}
			s.objects[kind+"/"+o.GetName()] = o.GetResourceVersion() + " " + string(o.GetUID())
		}
	}
	var kcls kclv1.KCLArtifactList
	if err := suite.client.List(ctx, &kcls, client.InNamespace(fleetNS)); err != nil {
		return s, err
	}
	for _, obj := range kcls.Items {
		if obj.Status.Artifact != nil {
			s.digests[obj.Name] = obj.Status.Artifact.Digest
			s.artifacts++
		}
	}
	ks, err := suite.install.Run(ctx, "-n", fleetNS, "get", "kustomizations", "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.status.lastAppliedRevision}{"\n"}{end}`)
	if err != nil {
		return s, err
	}
	for _, line := range strings.Fields(ks) {
		name, rev, _ := strings.Cut(line, "=")
		s.applied[name] = rev
	}
	return s, nil
}

func metaOf(list client.ObjectList) ([]metav1.Object, error) {
	switch l := list.(type) {
	case *corev1.ConfigMapList:
		return itemsOf(l.Items), nil
	case *appsv1.DeploymentList:
		return itemsOf(l.Items), nil
	case *appsv1.ReplicaSetList:
		return itemsOf(l.Items), nil
	case *corev1.PodList:
		return itemsOf(l.Items), nil
	}
	return nil, fmt.Errorf("no items of %T", list)
}

func itemsOf[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

func getCRD(ctx context.Context) (*apiextensionsv1.CustomResourceDefinition, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	out, err := suite.install.Run(ctx, "get", "crd", crdName, "-o", "yaml", "--show-managed-fields")
	if err != nil {
		return nil, err
	}
	return &crd, yaml.Unmarshal([]byte(out), &crd)
}

func controllerPodImage(ctx context.Context) (string, error) {
	pod, err := controllerPod(ctx)
	if err != nil {
		return "", err
	}
	return pod.Spec.Containers[0].Image, nil
}

// createTenantNamespace makes a namespace whose `default` ServiceAccount may do anything in it:
// the suite's kustomize-controller runs locked down (--default-service-account=default), so a
// KCLArtifact that names no account, as most tests' do, is applied as that account, which a
// namespace grants nothing by default. The grant is the one flux2-multi-tenancy gives a tenant's
// account (ClusterRole cluster-admin bound in the namespace only). The tenants of tenants_test.go
// are made as flux2-multi-tenancy makes them instead (nodeinstall.TenantYAML).
func createTenantNamespace(ctx context.Context, name string) error {
	if err := suite.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default-reconciler"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: name}}}
	return suite.client.Create(ctx, rb)
}

// poll polls cond every half second, each call bounded to 20 s, until it holds or timeout
// passes; state describes what was seen last, for the error. waitFor is poll for a test; setUp,
// which has no *testing.T, calls it directly.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) error {
	return pollEvery(ctx, timeout, 500*time.Millisecond, what, cond)
}

// pollEvery is poll asking every period, for waits whose duration is a figure.
func pollEvery(ctx context.Context, timeout, period time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var state string
	for {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		ok, s, err := cond(cctx)
		ccancel()
		if err != nil {
			s = "error: " + err.Error()
		}
		if s != "" {
			state = s
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s waiting for %s; last seen: %s", timeout, what, state)
		case <-time.After(period):
		}
	}
}

// TestUpgradeByFlux checks what setUp saw while Flux upgraded the previous release to this
// tree's image by one commit to the platform repository: the controller's Pod runs the new
// image, the CRD was changed in place, and nothing of the fleet changed: no workload object, no
// Pod, no artifact digest, no applied revision.
func TestUpgradeByFlux(t *testing.T) {
	run := suite.upgrade
	if run == nil {
		t.Fatal("setUp did not run the upgrade (upgradeWanted said no)")
	}
	t.Logf("previous release %s (Pod image %s) -> %s (Pod image %s)", run.previousImage, run.previousPodImage,
		controllerImage, run.currentPodImage)
	if run.previousPodImage != run.previousImage || run.currentPodImage != controllerImage {
		t.Errorf("controller Pod images: %s before, %s after; want %s, %s", run.previousPodImage,
			run.currentPodImage, run.previousImage, controllerImage)
	}
	checkCRDInPlace(t, run.crdBefore, run.crdAfter)
	if run.before.artifacts != fleetSize {
		t.Errorf("%d of %d KCLArtifacts had an artifact before the upgrade", run.before.artifacts, fleetSize)
	}
	changed := diffMaps("object", run.before.objects, run.after.objects)
	changed = append(changed, diffMaps("artifact digest", run.before.digests, run.after.digests)...)
	changed = append(changed, diffMaps("applied revision", run.before.applied, run.after.applied)...)
	figureCount("fleet objects changed by the upgrade", len(changed))
	figureCount("fleet objects compared across the upgrade", len(run.before.objects)+len(run.before.digests)+len(run.before.applied))
	if len(changed) > 0 {
		t.Errorf("the upgrade changed %d things of the fleet:\n  %s", len(changed), strings.Join(changed, "\n  "))
	}
	if pods := countPrefix(run.before.objects, "Pod/"); pods != fleetDeployments {
		t.Errorf("the fleet ran %d Pods, want %d", pods, fleetDeployments)
	}
	deleteFleet(t)
}

// checkCRDInPlace: the same object (UID) now holds this tree's schema, applied by Flux.
func checkCRDInPlace(t *testing.T, before, after *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	if before.UID != after.UID {
		t.Errorf("the CRD was replaced (UID %s -> %s), not upgraded in place", before.UID, after.UID)
	}
	data, err := os.ReadFile(filepath.Join(suite.repo, "config", "crd", "bases", crdName[len("kclartifacts."):]+"_kclartifacts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if len(after.Spec.Versions) != len(want.Spec.Versions) {
		t.Fatalf("the CRD serves %d versions, this tree's has %d", len(after.Spec.Versions), len(want.Spec.Versions))
	}
	for i, v := range want.Spec.Versions {
		if !equality.Semantic.DeepEqual(v.Schema, after.Spec.Versions[i].Schema) {
			t.Errorf("the CRD's %s schema is not this tree's after the upgrade", v.Name)
		}
	}
	managers := map[string]bool{}
	for _, m := range after.ManagedFields {
		managers[m.Manager] = true
	}
	if !managers["kustomize-controller"] {
		t.Errorf("the CRD's field managers are %v: kustomize-controller did not apply it", managers)
	}
	t.Logf("CRD %s: UID %s, resourceVersion %s -> %s, generation %d -> %d", crdName, after.UID,
		before.ResourceVersion, after.ResourceVersion, before.Generation, after.Generation)
}

func diffMaps(what string, before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if after[k] != v {
			out = append(out, fmt.Sprintf("%s %s: %q -> %q", what, k, v, after[k]))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, fmt.Sprintf("%s %s: new", what, k))
		}
	}
	sort.Strings(out)
	return out
}

func countPrefix(m map[string]string, prefix string) int {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// deleteFleet removes the fleet, so that later tests' "every artifact" checks are about their own.
func deleteFleet(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS}}
	if err := suite.client.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fleet namespace deleted", func(ctx context.Context) (bool, string, error) {
		err := suite.client.Get(ctx, client.ObjectKeyFromObject(ns), ns)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("phase %s, conditions %d", ns.Status.Phase, len(ns.Status.Conditions)), nil
	})
}
