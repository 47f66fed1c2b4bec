package fluxenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcl-flux/kcl-artifact-controller/internal/cli"
)

// KCLControllerOptions start a kcl-artifact-controller process (`run`) against the Env.
type KCLControllerOptions struct {
	// Binary is bin/kcl-artifact-controller (the engine library is found beside it).
	Binary string
	// Name distinguishes several controllers; it names the log file and state directory.
	Name string
	// StorageDir keeps artifacts; it defaults to <work dir>/<name>/storage and survives a restart.
	StorageDir string
	// StorageAddr is the artifact server's address (127.0.0.1:<port>); empty picks a free port.
	StorageAddr string
	// ServiceAccount, as "namespace/name", makes the controller act as that service account
	// (impersonation), so missing RBAC fails as it would in a cluster. Empty means admin.
	ServiceAccount string
	// Args are extra flags; Env extra environment variables (KEY=value).
	Args []string
	Env  []string
	// Standby starts a replica that another one leads: it is live (/healthz) but not ready
	// (/readyz answers only on the leader), so the start waits for liveness alone.
	Standby bool
}

// KCLController is a running kcl-artifact-controller.
type KCLController struct {
	*Process
	StorageDir  string
	StorageAddr string // artifact server, 127.0.0.1:<port>
	// MetricsAddr is the metrics endpoint, 127.0.0.1:<port> (or the --metrics-addr of
	// KCLControllerOptions.Args, when given there).
	MetricsAddr string
	// UIAddr is the browser view, the --ui-addr of KCLControllerOptions.Args ("" when off).
	UIAddr string
	// ReadyURL is /readyz: 200 on the leader only.
	ReadyURL string
}

// ArtifactURL is the base URL of the controller's artifact server.
func (c *KCLController) ArtifactURL() string { return "http://" + c.StorageAddr }

// MetricsURL is the URL of the controller's Prometheus metrics.
func (c *KCLController) MetricsURL() string { return "http://" + c.MetricsAddr + "/metrics" }

// StartKCLController starts the controller and waits until it is ready. Env.Stop stops it.
func (e *Env) StartKCLController(ctx context.Context, o KCLControllerOptions) (*KCLController, error) {
	if o.Name == "" {
		o.Name = "kcl-artifact-controller"
	}
	dir := filepath.Join(e.WorkDir, o.Name)
	if o.StorageDir == "" {
		o.StorageDir = filepath.Join(dir, "storage")
	}
	if err := os.MkdirAll(o.StorageDir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := e.KubeconfigPath
	if o.ServiceAccount != "" {
		var err error
		if kubeconfig, err = e.impersonatingKubeconfig(dir, o.ServiceAccount); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &KCLController{StorageDir: o.StorageDir, StorageAddr: o.StorageAddr, MetricsAddr: loopback(ports[1])}
	if c.StorageAddr == "" {
		c.StorageAddr = loopback(ports[0])
	}
	args := append([]string{
		"run",
		"--storage-path=" + o.StorageDir,
		"--storage-addr=" + c.StorageAddr,
		"--storage-adv-addr=" + c.StorageAddr,
		"--kcl-staging-dir=" + filepath.Join(dir, "staging"),
		// the test registries and Git servers listen on 127.0.0.1, refused by default
		"--kcl-deps-allowed-networks=127.0.0.0/8",
		// the tests' intervals are seconds, so that a retry does not make them wait; the 10s
		// floor of production has its own tests (internal/controller)
		"--min-interval=1s",
		"--metrics-addr=" + c.MetricsAddr,
		"--health-addr=" + loopback(ports[2]),
		"--log-encoding=console",
		// several controllers run on this machine at once: the browser view only where asked
		"--ui-addr=",
	}, o.Args...)
	if addr, _ := cli.FlagValue(o.Args, "metrics-addr"); addr != "" {
		c.MetricsAddr = addr // the last one wins, as pflag reads it
	}
	c.UIAddr, _ = cli.FlagValue(o.Args, "ui-addr")
	env := append(controllerEnv(kubeconfig), o.Env...)
	if c.Process, err = StartProcess(o.Name, o.Binary, args, env, filepath.Join(e.LogDir, o.Name+".log")); err != nil {
		return nil, err
	}
	e.kclMu.Lock()
	e.kclControllers = append(e.kclControllers, c)
	e.kclMu.Unlock()
	c.ReadyURL = "http://" + loopback(ports[2]) + "/readyz"
	c.HealthURL = c.ReadyURL
	if o.Standby {
		c.HealthURL = "http://" + loopback(ports[2]) + "/healthz"
	}
	if err := c.waitHealthy(ctx, e.opts.StartTimeout); err != nil {
		return nil, err
	}
	return c, nil
}

// StopKCLController stops one controller (SIGTERM, then SIGKILL after the grace period), for
// tests that restart it.
func (e *Env) StopKCLController(c *KCLController) error {
	return c.Stop(e.opts.StopGrace)
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig that acts as a service account.
func (e *Env) impersonatingKubeconfig(dir, serviceAccount string) (string, error) {
	ns, name, ok := cut(serviceAccount)
	if !ok {
		return "", fmt.Errorf("service account %q is not namespace/name", serviceAccount)
	}
	cfg, err := clientcmd.LoadFromFile(e.KubeconfigPath)
	if err != nil {
		return "", err
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + ns + ":" + name
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

func cut(s string) (string, string, bool) {
	a, b, ok := strings.Cut(s, "/")
	return a, b, ok && a != "" && b != ""
}
