package kubenode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ctr runs containerd's client against the node's containerd, in the CRI's namespace k8s.io.
// The socket is a file under RunDir, reachable from this mount namespace.
func (n *Node) ctr(ctx context.Context, stdin io.Reader, args ...string) error {
	_, err := n.ctrOutput(ctx, stdin, args...)
	return err
}

func (n *Node) ctrOutput(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, n.bin.Ctr, append([]string{"--address", n.ContainerdSocket(),
		"--namespace", "k8s.io"}, args...)...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// ImportImage loads an image tarball (docker-archive or OCI layout, as `make image` writes them)
// into the node's containerd, unpacked for the CRI's snapshotter, so Pods start it without a pull.
func (n *Node) ImportImage(ctx context.Context, tarPath string) error {
	return n.ctr(ctx, nil, "images", "import", "--snapshotter", "overlayfs", "--no-unpack=false", tarPath)
}

// Images lists the image references the node's containerd holds.
func (n *Node) Images(ctx context.Context) ([]string, error) {
	out, err := n.ctrOutput(ctx, nil, "images", "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// PullOverHTTP lets the node's containerd pull from the registry at host (ip:port) over plain
// HTTP: a hosts.toml under containerd's config_path, which it reads at each pull, so no restart.
// Every other host keeps the _default entry that answers nothing.
func (n *Node) PullOverHTTP(host string) error {
	if _, _, err := net.SplitHostPort(host); err != nil {
		return fmt.Errorf("registry host %q: %w", host, err)
	}
	dir := n.data("containerd", "hosts", host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	url := "http://" + host
	config := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", url, url)
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(config), 0o644)
}
