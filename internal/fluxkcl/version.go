package fluxkcl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml/goyaml.v2"

	"github.com/kcl-flux/kcl-artifact-controller/internal/version"
)

// controllerSelector finds the controller's Deployment, in whatever namespace it was installed
// (config/default uses kcl-system, not flux's flux-system).
const controllerSelector = "app.kubernetes.io/name=kcl-artifact-controller"

const (
	unknown         = "unknown"
	engineNotNeeded = "not needed"
)

// versionInfo is what `flux kcl version` prints; a struct, so that YAML keeps this order.
type versionInfo struct {
	Plugin     string `yaml:"flux-kcl" json:"flux-kcl"`
	Controller string `yaml:"kcl-artifact-controller,omitempty" json:"kcl-artifact-controller,omitempty"`
	Engine     string `yaml:"kcl-engine" json:"kcl-engine"`
}

func (a *app) versionCommand() *cobra.Command {
	var client bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the controller's version in the cluster",
		Long: `Print the plugin's version, the version of kcl-artifact-controller in the cluster (the tag of
its Deployment's image) and the KCL engine the plugin links (none: only build and diff need one).
Without a reachable cluster the controller is "unknown" and the command fails, as flux version does.`,
		Example: `  flux kcl version
  flux kcl version --client -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "yaml" && output != "json" {
				return fmt.Errorf("--output must be json or yaml, not %s", output)
			}
			info := versionInfo{Plugin: version.Version, Engine: engineNotNeeded}
			var clusterErr error
			if !client {
				info.Controller, clusterErr = a.controllerVersion(cmd.Context())
			}
			if err := printVersion(a, info, output); err != nil {
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

func printVersion(a *app, info versionInfo, output string) error {
	var out []byte
	var err error
	if output == "json" {
		out, err = json.MarshalIndent(info, "", "  ")
		out = append(out, '\n')
	} else {
		out, err = yaml.Marshal(info)
	}
	if err != nil {
		return err
	}
	_, err = a.stdout.Write(out)
	return err
}
