package node

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/test/nodeinstall"
)

// tenantClient acts as the tenant's own account: cluster-admin in its namespace, nothing else.
func tenantClient(t *testing.T, tenant string) client.Client {
	t.Helper()
	c, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(suite.node.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + tenant + ":" + nodeinstall.TenantAccount(tenant),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + tenant, "system:authenticated"},
	}
	tc, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// Tenant-a, with its own account's rights, creates ExternalArtifacts whose status names
// tenant-b's artifact and Kustomizations that apply them into tenant-a. The URLs are what a tenant
// can derive from public names: the artifact server's address, tenant-b's namespace, the
// KCLArtifact's name, and the digest (the real one here: the worst case), bare, through the
// `latest` alias, and with tenant-a's own token. Before artifact URLs carried their object's
// token, kustomize-controller downloaded tenant-b's artifact and applied tenant-b's ConfigMap
// into tenant-a, where tenant-a reads it.
func TestTenantForgedExternalArtifactCannotFetchAnotherTenantsArtifact(t *testing.T) {
	tenants(t)
	ctx := context.Background()
	theirs := tenantArtifactURL(t, tenantB, "legit")
	own := tenantArtifactURL(t, tenantA, "legit")
	bare := *theirs
	bare.RawQuery = ""
	latest := bare
	latest.Path = latest.Path[:strings.LastIndex(latest.Path, "/")+1] + "latest.tar.gz"
	withOwnToken := bare
	withOwnToken.RawQuery = own.RawQuery
	b, err := getKCLArtifact(ctx, tenantB, "legit")
	if err != nil {
		t.Fatal(err)
	}
	tc := tenantClient(t, tenantA)
	forgeries := map[string]string{"forged-bare": bare.String(), "forged-latest": latest.String(), "forged-token": withOwnToken.String()}
	for name, u := range forgeries {
		ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name}}
		if err := tc.Create(ctx, ea); err != nil {
			t.Fatalf("tenant-a creates ExternalArtifact %s: %v", name, err)
		}
		ea.Status.Artifact = &meta.Artifact{Path: strings.TrimPrefix(bare.Path, "/"), URL: u,
			Revision: b.Status.Artifact.Revision, Digest: b.Status.Artifact.Digest, LastUpdateTime: metav1.Now()}
		conditions.MarkTrue(ea, meta.ReadyCondition, meta.SucceededReason, "forged by tenant-a")
		if err := tc.Status().Update(ctx, ea); err != nil {
			t.Fatalf("tenant-a writes the status of ExternalArtifact %s: %v", name, err)
		}
		ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: tenantA, Name: name},
			Spec: kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Minute}, Path: "./", Prune: true,
				RetryInterval:   &metav1.Duration{Duration: 5 * time.Second},
				SourceRef:       kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.ExternalArtifactKind, Name: name},
				TargetNamespace: tenantA, ServiceAccountName: nodeinstall.TenantAccount(tenantA)}}
		if err := tc.Create(ctx, ks); err != nil {
			t.Fatalf("tenant-a creates Kustomization %s: %v", name, err)
		}
		// the forgeries never serve: the tests after this one see every ExternalArtifact served
		t.Cleanup(func() {
			for _, o := range []client.Object{ks, ea} {
				if err := suite.client.Delete(context.Background(), o); client.IgnoreNotFound(err) != nil {
					t.Errorf("deleting %T %s: %v", o, name, err)
				}
			}
		})
	}
	for name := range forgeries {
		t.Run(name, func(t *testing.T) {
			var msg string
			waitFor(t, "Kustomization tenant-a/"+name+" found no artifact at the forged URL", func(ctx context.Context) (bool, string, error) {
				ks := &kustomizev1.Kustomization{}
				if err := suite.client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: name}, ks); err != nil {
					return false, "", err
				}
				c := conditions.Get(ks, meta.ReadyCondition)
				if c == nil {
					return false, "no Ready condition", nil
				}
				msg = c.Message
				if c.Status == metav1.ConditionTrue {
					return false, "", fmt.Errorf("kustomize-controller applied tenant-b's artifact: %s", c.Message)
				}
				// kustomize-controller's words for the artifact server's 404 (fetch.ErrFileNotFound)
				return c.Reason == meta.ArtifactFailedReason && strings.Contains(c.Message, "artifact not found"),
					c.Reason + ": " + c.Message, nil
			})
			t.Logf("Kustomization tenant-a/%s: %s", name, msg)
		})
	}
	// tenant-legit in tenant-a is tenant-a's own (its legit KCLArtifact), never tenant-b's
	var cm corev1.ConfigMap
	if err := suite.client.Get(ctx, client.ObjectKey{Namespace: tenantA, Name: "tenant-legit"}, &cm); err == nil &&
		cm.Data["owner"] == tenantB {
		t.Fatalf("tenant-b's ConfigMap was applied into tenant-a: %v", cm.Data)
	}
}

// tenantArtifactURL waits until the tenant's KCLArtifact has an artifact and returns its URL.
func tenantArtifactURL(t *testing.T, ns, name string) *url.URL {
	t.Helper()
	var raw string
	waitFor(t, ns+"/"+name+" has an artifact", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil || obj.Status.Artifact == nil {
			return false, "no artifact yet", nil
		}
		raw = obj.Status.Artifact.URL
		return true, "", nil
	})
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
