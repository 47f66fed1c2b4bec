package ocipush

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// maxAnswer bounds a push process's answer: an error message.
const maxAnswer = 64 << 10

// wireRequest is what a push process is told on its stdin: credentials never travel as
// arguments, which other processes can read.
type wireRequest struct {
	Network      kclmod.Options `json:"network"`
	Proxy        string         `json:"proxy,omitempty"`
	DockerConfig []byte         `json:"dockerConfig,omitempty"`
	Repository   string         `json:"repository"`
	Insecure     bool           `json:"insecure,omitempty"`
	Layout       string         `json:"layout,omitempty"`
	Pushes       []push         `json:"pushes,omitempty"`
	Pull         *pull          `json:"pull,omitempty"`
}

// pull is an artifact layer to fetch back into a file.
type pull struct {
	Manifest string `json:"manifest"`
	Out      string `json:"out"`
	MaxBytes int64  `json:"maxBytes"`
}

// wireResult is a push process's answer, on fd 3.
type wireResult struct {
	Error          string `json:"error,omitempty"`
	HostNotAllowed bool   `json:"hostNotAllowed,omitempty"`
}

// run has a push process send the layout in dir to repo.
func (p *Pusher) run(ctx context.Context, req Request, repo name.Repository, dir string, pushes []push) error {
	w := wireRequest{DockerConfig: req.DockerConfig, Insecure: req.Insecure, Layout: dir, Pushes: pushes}
	return p.call(ctx, w, repo, childproc.Config{Reads: []string{dir}})
}

// call runs one push process for w, confined by cfg (reads and writes; the rest is p's).
func (p *Pusher) call(ctx context.Context, w wireRequest, repo name.Repository, cfg childproc.Config) error {
	w.Network, w.Repository = p.o.Network, repo.Name()
	if w.Network.Proxy != nil {
		w.Proxy, w.Network.Proxy = w.Network.Proxy.String(), nil
	}
	in, err := json.Marshal(w)
	if err != nil {
		return err
	}
	cfg.Memory, cfg.Sandbox = p.o.MemoryLimit, p.o.Sandbox
	exit, err := childproc.Run(ctx, p.o.Command, cfg, in, maxAnswer)
	if err != nil {
		return fmt.Errorf("starting a push: %w", err)
	}
	if exit.Stopped {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &Error{Reason: ReasonTimeout, Detail: fmt.Sprintf(
				"the exchange with %s did not finish within %s; the push process was killed", repo.Name(), p.o.Timeout)}
		}
		return &Error{Reason: ReasonTimeout, Detail: "cancelled; the push process was killed"}
	}
	var res wireResult
	if exit.Answer == nil || json.Unmarshal(exit.Answer, &res) != nil {
		return p.died(exit, repo)
	}
	switch {
	case res.HostNotAllowed:
		return &Error{Reason: ReasonHostNotAllowed, Detail: res.Error}
	case res.Error != "":
		return &Error{Reason: ReasonRegistry, Detail: res.Error}
	}
	return nil
}

// died explains a process that gave no answer from its exit and the runtime's own diagnostic,
// never from the rest of its output.
func (p *Pusher) died(exit childproc.Exit, repo name.Repository) error {
	if exit.OutOfMemory() {
		return &Error{Reason: ReasonMemory, Detail: fmt.Sprintf("pushing to %s exceeded the push process's memory limit "+
			"of %d MiB (the registry's answer asked for more; %s)", repo.Name(), p.o.MemoryLimit>>20, exit.Status())}
	}
	if line, ok := exit.StartFailure(processName); ok {
		return &Error{Reason: ReasonCrash, Detail: "the push failed to start: " + line}
	}
	return &Error{Reason: ReasonCrash, Detail: "the process pushing to " + repo.Name() + " died (" + exit.Status() + ")"}
}
