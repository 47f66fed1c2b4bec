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

// maxAnswer bounds a push process's answer: an error message, or a pull's provenance statement.
const maxAnswer = 1 << 20

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
	Retag        *retag         `json:"retag,omitempty"`
}

// retag moves a tag to a manifest the repository holds.
type retag struct {
	Manifest string `json:"manifest"`
	Tag      string `json:"tag"`
}

// pull is an artifact layer to fetch back into a file, once its signature by PublicKey (PEM)
// is verified.
type pull struct {
	Manifest  string `json:"manifest"`
	Out       string `json:"out"`
	MaxBytes  int64  `json:"maxBytes"`
	PublicKey []byte `json:"publicKey"`
}

// wireResult is a push process's answer, on fd 3.
type wireResult struct {
	Error          string `json:"error,omitempty"`
	HostNotAllowed bool   `json:"hostNotAllowed,omitempty"`
	// Refused: a pull's artifact did not verify.
	Refused bool `json:"refused,omitempty"`
	// Statement is a pull's verified provenance statement.
	Statement []byte `json:"statement,omitempty"`
}

// run has a push process send the layout in dir to repo.
func (p *Pusher) run(ctx context.Context, req Request, repo name.Repository, dir string, pushes []push) error {
	w := wireRequest{DockerConfig: req.DockerConfig, Insecure: req.Insecure, Layout: dir, Pushes: pushes}
	_, err := p.call(ctx, w, repo, childproc.Config{Reads: []string{dir}})
	return err
}

// call runs one push process for w, confined by cfg (reads and writes; the rest is p's).
func (p *Pusher) call(ctx context.Context, w wireRequest, repo name.Repository, cfg childproc.Config) (*wireResult, error) {
	w.Network, w.Repository = p.o.Network, repo.Name()
	if w.Network.Proxy != nil {
		w.Proxy, w.Network.Proxy = w.Network.Proxy.String(), nil
	}
	in, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	cfg.Memory, cfg.Sandbox = p.o.MemoryLimit, p.o.Sandbox
	exit, err := childproc.Run(ctx, p.o.Command, cfg, in, maxAnswer)
	if err != nil {
		return nil, fmt.Errorf("starting a push process: %w", err)
	}
	if exit.Stopped {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &Error{Reason: ReasonTimeout, Detail: fmt.Sprintf(
				"the exchange with %s did not finish within %s; the push process was killed", repo.Name(), p.o.Timeout)}
		}
		return nil, &Error{Reason: ReasonTimeout, Detail: "cancelled; the push process was killed"}
	}
	var res wireResult
	if exit.Answer == nil || json.Unmarshal(exit.Answer, &res) != nil {
		return nil, p.died(exit, repo)
	}
	switch {
	case res.HostNotAllowed:
		return nil, &Error{Reason: ReasonHostNotAllowed, Detail: res.Error}
	case res.Refused:
		return nil, &Error{Reason: ReasonRefused, Detail: res.Error}
	case res.Error != "":
		return nil, &Error{Reason: ReasonRegistry, Detail: res.Error}
	}
	return &res, nil
}

// died explains a process that gave no answer from its exit and the runtime's own diagnostic,
// never from the rest of its output.
func (p *Pusher) died(exit childproc.Exit, repo name.Repository) error {
	if exit.OutOfMemory() {
		return &Error{Reason: ReasonMemory, Detail: fmt.Sprintf("the exchange with %s exceeded the push process's memory limit "+
			"of %d MiB (the registry's answer asked for more; %s)", repo.Name(), p.o.MemoryLimit>>20, exit.Status())}
	}
	if line, ok := exit.StartFailure(processName); ok {
		return &Error{Reason: ReasonCrash, Detail: "the push failed to start: " + line}
	}
	return &Error{Reason: ReasonCrash, Detail: "the push process talking to " + repo.Name() + " died (" + exit.Status() + ")"}
}
