// Package e2e runs kcl-artifact-controller end to end against real components: a Git commit is
// cloned by source-controller, rendered by the controller (run as a process, as the service
// account of the install manifests, with leader election), published as a Flux ExternalArtifact
// and applied by kustomize-controller to a real kube-apiserver.
//
// It needs the binaries of `make testbin` (bin/testbin.env) and `make build`
// (bin/kcl-artifact-controller, or $KCL_BINARY); without them it fails, it never skips.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	// waitTimeout bounds every wait: kustomize-controller can be slow on 2 cores.
	waitTimeout = 3 * time.Minute
	// controllerName names the controller's log file and state directory.
	controllerName = "kcl-artifact-controller"
	// leasePrefix begins the names of the controller's leader election leases: one per shard.
	leasePrefix = "kcl-artifact-controller-leader-election"
	// fieldOwner is the server-side apply field manager of this suite.
	fieldOwner = "kcl-e2e"
)

// suite is the state shared by all tests: one environment for the package.
var suite struct {
	env     *fluxenv.Env
	binary  string
	repo    string // repository root
	install *installation

	mu         sync.Mutex
	controller *fluxenv.KCLController
}

// kclController returns the running controller (the restart test replaces it).
func kclController() *fluxenv.KCLController {
	suite.mu.Lock()
	defer suite.mu.Unlock()
	return suite.controller
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) (code int) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}
	fatal := func(format string, args ...any) int {
		logf("e2e: FATAL: "+format, args...)
		return 1
	}

	root, err := fluxenv.RepoRoot()
	if err != nil {
		return fatal("%v", err)
	}
	suite.repo = root
	binary := os.Getenv("KCL_BINARY")
	if binary == "" {
		binary = "../../bin/kcl-artifact-controller"
	}
	if binary, err = filepath.Abs(binary); err != nil {
		return fatal("%v", err)
	}
	if st, err := os.Stat(binary); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fatal("kcl-artifact-controller binary %s is missing or not executable (run `make build`, "+
			"or set KCL_BINARY to the binary): %v", binary, err)
	}
	suite.binary = binary

	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		return fatal("%v", err) // the message says to run `make testbin`
	}

	// The install manifests come first: the controller runs as their service account.
	inst, err := buildInstallation(filepath.Join(root, "config", "default"))
	if err != nil {
		return fatal("building the install manifests: %v", err)
	}
	suite.install = inst

	ctx := context.Background()
	start := time.Now()
	env, err := fluxenv.Start(ctx, fluxenv.Options{
		WorkDir:     os.Getenv("E2E_WORKDIR"), // empty: a temporary directory, removed by Stop
		TestBin:     tb,
		CRDDirs:     []string{filepath.Join(root, "config", "crd", "bases")},
		AddToScheme: []func(*runtime.Scheme) error{kclv1.AddToScheme},
		Logf:        logf,
		// ImagePolicies as inputs (imageautomation_test.go), scanning Registry
		ImageReflector: true,
	})
	if err != nil {
		return fatal("starting the Flux environment: %v", err)
	}
	suite.env = env
	logf("e2e: environment started in %s (work dir %s)", time.Since(start).Round(time.Millisecond), env.WorkDir)
	defer func() {
		if code != 0 {
			logf("e2e: logs of the environment:\n%s", env.LogTails(30))
		}
		if err := env.Stop(); err != nil {
			logf("e2e: stopping the environment: %v", err)
			code = 1
		}
	}()

	if err := inst.installForReal(ctx, env.Client); err != nil {
		return fatal("installing the namespace, service account and RBAC of config/default: %v", err)
	}
	// The controller reads its leader election namespace from RUNTIME_NAMESPACE, as in the
	// Deployment; StartKCLController passes the process environment through.
	if err := os.Setenv("RUNTIME_NAMESPACE", inst.namespace); err != nil {
		return fatal("%v", err)
	}
	c, err := startController(ctx, "", "")
	if err != nil {
		return fatal("%v", err)
	}
	suite.controller = c
	logf("e2e: %s running as %s (pid %d), artifacts at %s", controllerName, inst.serviceAccount(), c.PID(), c.ArtifactURL())

	code = m.Run()

	// Every API call of the controller went through the service account's RBAC: a refusal
	// anywhere is missing RBAC, even one the tests did not notice.
	if lines := grepLines(kclController().LogPath, "forbidden"); len(lines) > 0 {
		logf("e2e: FAIL: the controller was refused access (missing RBAC in config/):\n%s", strings.Join(lines, "\n"))
		code = 1
	}
	return code
}

// restartController stops the controller, runs between (when set) while it is stopped, and
// starts it again on the same storage directory, with its artifact server at storageAddr (as a
// Pod restarted behind its Service) or, when that is empty, at a new address.
func restartController(t *testing.T, storageAddr string, between func()) *fluxenv.KCLController {
	t.Helper()
	old := kclController()
	if err := suite.env.StopKCLController(old); err != nil {
		t.Fatalf("stopping %s: %v", controllerName, err)
	}
	if between != nil {
		between()
	}
	c, err := startController(t.Context(), old.StorageDir, storageAddr)
	if err != nil {
		t.Fatal(err)
	}
	suite.mu.Lock()
	suite.controller = c
	suite.mu.Unlock()
	return c
}

// startController starts kcl-artifact-controller as the install's service account with leader
// election, and waits until it leads and serves artifacts.
func startController(ctx context.Context, storageDir, storageAddr string) (*fluxenv.KCLController, error) {
	env := suite.env
	uiPort, err := fluxenv.FreePort()
	if err != nil {
		return nil, err
	}
	c, err := env.StartKCLController(ctx, fluxenv.KCLControllerOptions{
		Binary:         suite.binary,
		Name:           controllerName,
		StorageDir:     storageDir,
		StorageAddr:    storageAddr,
		ServiceAccount: suite.install.serviceAccount(),
		// the main shard: objects without a sharding key (TestShards starts shard1); the browser
		// view at UIAddr (TestUI)
		Args: []string{"--enable-leader-election", "--log-level=debug", "--watch-label-selector=!" + shardKey,
			"--ui-addr=127.0.0.1:" + strconv.Itoa(uiPort)},
	})
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", controllerName, err)
	}
	// The artifact server starts once the controller is elected leader: any HTTP answer means
	// the lease was taken (so the leases RBAC works) and artifacts are served.
	hc := httpClient()
	err = fluxenv.WaitFor(ctx, waitTimeout, controllerName+" to be elected leader and serve artifacts at "+c.ArtifactURL(),
		func(ctx context.Context) (bool, string, error) {
			var leases coordinationv1.LeaseList
			holder := "no lease"
			if err := env.Client.List(ctx, &leases, client.InNamespace(suite.install.namespace)); err == nil {
				for _, l := range leases.Items {
					if strings.HasPrefix(l.Name, leasePrefix) {
						holder = "lease " + l.Name + " held by " + deref(l.Spec.HolderIdentity)
					}
				}
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.ArtifactURL()+"/", nil)
			resp, err := hc.Do(req)
			if err != nil {
				return false, holder + "; artifact server: " + err.Error(), nil
			}
			resp.Body.Close()
			return true, "", nil
		})
	if err != nil {
		return nil, fmt.Errorf("%w\n--- last 40 lines of %s:\n%s", err, c.LogPath, fluxenv.Tail(c.LogPath, 40))
	}
	return c, nil
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}
