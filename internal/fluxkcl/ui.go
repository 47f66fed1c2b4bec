package fluxkcl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/kcl-flux/kcl-artifact-controller/internal/cli"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// defaultUIAddr is the controller's default --ui-addr: the Pod's loopback, which only a
// port-forward reaches.
const defaultUIAddr = "127.0.0.1:9091"

type uiFlags struct {
	address string
	port    int
	open    bool
}

// uiCommand is `flux kcl ui`: the browser view through a port-forward to the leader Pod.
func (a *app) uiCommand() *cobra.Command {
	var f uiFlags
	cmd := &cobra.Command{
		Use:   "ui [name]",
		Short: "Open the browser view of artifacts, history and diffs",
		Long: `Port-forward to the browser view of the controller's leader Pod and print its local URL (with a
name, the page of that KCLArtifact): the KCLArtifacts with their state, each one's objects, YAML,
kept history with health and rollbacks, and the diff between any two kept artifacts, Secret values
masked. The controller serves the view on its Pod's loopback only (--ui-addr, default
127.0.0.1:9091), so no other Pod reaches it; the port-forward needs pods/portforward in the
controller's namespace. It runs until interrupted; --timeout bounds only the start.`,
		Example: `  flux kcl ui
  flux kcl ui podinfo -n apps --port 8080 --open`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.ui(ctx, args, f)
		},
	}
	cmd.Flags().StringVar(&f.address, "address", "127.0.0.1", "the local address to listen on")
	cmd.Flags().IntVar(&f.port, "port", 9091, "the local port to listen on (0 picks a free one)")
	cmd.Flags().BoolVar(&f.open, "open", false, "open the URL in the default browser")
	return cmd
}

func (a *app) ui(ctx context.Context, args []string, f uiFlags) error {
	start, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	path := "/"
	if len(args) == 1 {
		if _, _, err := a.clientAndArtifact(start, args[0]); err != nil {
			return err
		}
		path = fmt.Sprintf("/kclartifact/%s/%s/", *a.kube.Namespace, args[0])
	}
	fw, err := a.forwardToLeader(start, "browser view", uiPort, f.address, f.port)
	if errors.Is(err, errNoDeployment) {
		return fmt.Errorf("%w: a controller running outside the cluster serves its browser view itself, at its --ui-addr (default %s)", err, defaultUIAddr)
	}
	if err != nil {
		return err
	}
	defer fw.Close()
	u := fw.URL + path
	fmt.Fprintln(a.stdout, termsafe.Line(u))
	a.log.Successf("browser view at %s (Ctrl+C stops it)", u)
	if f.open {
		openBrowser(a.log, u)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-fw.Done():
		return fmt.Errorf("port-forward to Pod %s ended: %v", fw.Pod, err)
	}
}

// uiPort is the port of the browser view, from the manager's --ui-addr.
func uiPort(d *appsv1.Deployment) (int, error) {
	c, err := managerContainer(d)
	if err != nil {
		return 0, err
	}
	addr, ok := cli.FlagValue(c.Args, "ui-addr")
	if !ok {
		addr = defaultUIAddr
	}
	if addr == "" {
		return 0, fmt.Errorf("the browser view is off: Deployment %s/%s runs the controller with an empty --ui-addr", d.Namespace, d.Name)
	}
	return addrPort(addr)
}

// openBrowser starts the desktop's browser; failing is only a warning, since the URL is printed.
func openBrowser(log logger, u string) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	if err := exec.Command(name, u).Start(); err != nil {
		log.Warningf("opening a browser: %v", err)
	}
}
