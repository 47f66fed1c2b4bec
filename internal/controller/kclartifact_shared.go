package controller

import (
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
)

// Bounds of the outputs kept for identical inputs.
const (
	sharedMaxBytes = 32 << 20
	sharedMaxAge   = time.Minute
)

// sharedRenders lets the KCLArtifacts of one namespace whose inputs are identical render once:
// concurrent ones wait for the first, and later ones take its output for a minute. The key holds
// the namespace (tenants share nothing), the input digest and the names of the credentials (a
// private dependency is not rendered for a KCLArtifact that was not given its credentials).
type sharedRenders struct {
	group  singleflight.Group
	mu     sync.Mutex
	recent map[string]sharedOutput
	bytes  int
}

type sharedOutput struct {
	output renderOutput
	at     time.Time
}

// renderOutput is what a render gives: the YAML, and the kcl.mod dependencies it resolved (for
// the provenance of what is pushed).
type renderOutput struct {
	yaml string
	deps []provenance.Dependency
}

func sharedKey(obj *kclv1.KCLArtifact, digest string) string {
	parts := []string{obj.GetNamespace(), digest}
	if ref := obj.Spec.RegistrySecretRef; ref != nil {
		parts = append(parts, "registry="+ref.Name)
	}
	for _, c := range obj.Spec.GitCredentials {
		parts = append(parts, "git="+c.Host+"="+c.SecretRef.Name)
	}
	return strings.Join(parts, "\x00")
}

// do returns the output of render for key, rendering only when no identical render is running
// or recently done. Failures are shared with the concurrent callers only.
func (s *sharedRenders) do(key string, render func() (renderOutput, error)) (renderOutput, error) {
	if out, ok := s.get(key); ok {
		return out, nil
	}
	v, err, _ := s.group.Do(key, func() (any, error) {
		out, err := render()
		if err == nil {
			s.put(key, out)
		}
		return out, err
	})
	out, _ := v.(renderOutput)
	return out, err
}

func (s *sharedRenders) get(key string) (renderOutput, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.recent[key]
	if !ok || time.Since(o.at) > sharedMaxAge {
		return renderOutput{}, false
	}
	return o.output, true
}

func (s *sharedRenders) put(key string, output renderOutput) {
	if len(output.yaml) > sharedMaxBytes/4 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recent == nil {
		s.recent = map[string]sharedOutput{}
	}
	now := time.Now()
	for k, o := range s.recent {
		if now.Sub(o.at) > sharedMaxAge || s.bytes+len(output.yaml) > sharedMaxBytes {
			s.bytes -= len(o.output.yaml)
			delete(s.recent, k)
		}
	}
	if old, ok := s.recent[key]; ok {
		s.bytes -= len(old.output.yaml)
	}
	s.recent[key] = sharedOutput{output: output, at: now}
	s.bytes += len(output.yaml)
}
