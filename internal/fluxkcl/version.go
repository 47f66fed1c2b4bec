package fluxkcl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kcl-flux/kcl-artifact-controller/internal/version"
)

// controllerSelector finds the controller's Deployment, in whatever namespace it was installed
// (config/default uses kcl-system, not flux's flux-system).
const controllerSelector = "app.kubernetes.io/name=kcl-artifact-controller"

const (
	unknown = "unknown"
	// noEngine is the engine line without kcl-artifact-controller: only build and diff
	// kclartifact need it
	noEngine = "none (build and diff kclartifact run kcl-artifact-controller, not found)"
)

// versionInfo is what `flux kcl version` prints; printData sorts the keys, which keeps the plugin,
// the controller and the engine in that order.
type versionInfo struct {
	Plugin     string `json:"flux-kcl"`
	Controller string `json:"kcl-artifact-controller,omitempty"`
	Engine     string `json:"kcl-engine"`
}

func (a *app) versionCommand() *cobra.Command {
	var client bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the controller's version in the cluster",
		Long: `Print the plugin's version, the version of kcl-artifact-controller in the cluster (the tag of
its Deployment's image) and the KCL engine that build and diff kclartifact use: that of the
kcl-artifact-controller binary they run ($KCL_ARTIFACT_CONTROLLER, beside flux-kcl or on PATH); the
plugin links none. Without a reachable cluster the controller is "unknown" and the command fails, as flux version does.`,
		Example: `  flux kcl version
  flux kcl version --client -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "json", "yaml"); err != nil {
				return err
			}
			info := versionInfo{Plugin: version.Version}
			var engineErr error
			if info.Engine, engineErr = localEngine(cmd.Context()); engineErr != nil {
				a.log.Warningf("%s", engineErr)
			}
			var clusterErr error
			if !client {
				info.Controller, clusterErr = a.controllerVersion(cmd.Context())
			}
			if err := a.printData(output, info); err != nil {
				return err
			}
			return clusterErr
		},
	}
	cmd.Flags().BoolVar(&client, "client", false, "print only the plugin's version")
	cmd.Flags().StringVarP(&output, "output", "o", "yaml",
		"the format in which the information should be printed. can be 'json' or 'yaml'")
	return cmd
}

// controllerVersion is the image tag of the controller's Deployment; "unknown" with the reason
// when there is no cluster or no controller.
func (a *app) controllerVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	_, cs, err := a.clientset()
	if err != nil {
		return unknown, err
	}
	d, err := controllerDeployment(ctx, cs)
	if err != nil {
		return unknown, err
	}
	c, err := managerContainer(d)
	if err != nil {
		return unknown, err
	}
	return imageTag(c.Image), nil
}

// imageTag is the tag of an image reference ("unknown" without one), with any digest dropped.
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return unknown
	}
	return image[i+1:]
}

// localEngine is the engine version of the kcl-artifact-controller binary build and diff
// kclartifact would run, from its `version` ("KCL engine 0.12.1 (<library>, git <sha>)"); when that
// binary fails, "unavailable" and why, for a warning line.
func localEngine(ctx context.Context) (string, error) {
	exe, err := findController(os.Getenv(controllerEnv), os.Executable, exec.LookPath)
	if err != nil {
		return noEngine, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, "version")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "unavailable", fmt.Errorf("%s version: %s (%v)", exe, oneLine(stderr.String()), err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "KCL engine "); ok {
			v, _, _ = strings.Cut(v, " ")
			return v + " (through " + exe + ")", nil
		}
	}
	return "unavailable", fmt.Errorf("%s version printed no KCL engine", exe)
}
