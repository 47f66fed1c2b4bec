// Package devstate is the state of the local dev cluster run by test/cmd/devcluster: where it lives
// (bin/dev-cluster/) and what its supervisor records in state.json once the cluster is ready.
// test/cmd/devcluster writes it; test/cmd/demo reads it.
package devstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// Where the dev cluster publishes the fixtures besides Git.
const (
	FixtureTag    = "1.0.0"
	FixtureBucket = "fixtures"
)

// S3 is the dev cluster's S3-compatible object store.
type S3 struct {
	Endpoint  string `json:"endpoint"` // 127.0.0.1:<port>, plain HTTP
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
}

// State is written by the supervisor to bin/dev-cluster/state.json once the cluster is ready.
type State struct {
	Supervisor   fluxenv.PIDInfo   `json:"supervisor"`
	Processes    []fluxenv.PIDInfo `json:"processes"`
	Kubeconfig   string            `json:"kubeconfig"`
	APIServer    string            `json:"apiServer"`
	GitURLBase   string            `json:"gitURLBase"`
	Repositories map[string]string `json:"repositories"` // name -> clone URL
	// Artifacts are the fixtures pushed to the OCI registry as `flux push artifact` does:
	// name -> oci://127.0.0.1:<port>/fixtures/<name>, tag FixtureTag.
	Artifacts map[string]string `json:"artifacts"`
	// S3 serves the fixtures in bucket FixtureBucket, each under <name>/.
	S3          S3            `json:"s3"`
	StorageAddr string        `json:"storageAddr"`
	Ports       fluxenv.Ports `json:"ports"`
	CRDDirs     []string      `json:"crdDirs"`
	LogDir      string        `json:"logDir"`
	Ready       time.Time     `json:"ready"`
	// KCLController is this project's controller, when the cluster was started with one
	// (`up --with-kcl-controller`).
	KCLController *KCLController `json:"kclController,omitempty"`
	// ImageReflectorMissing says why image-reflector-controller does not run (not built); empty
	// when it runs (Ports.ImageReflectorHealth is then set) or for a state of an older devcluster.
	ImageReflectorMissing string `json:"imageReflectorMissing,omitempty"`
	// Metrics are the Prometheus and the exporter spec.verify reads here; nil without
	// bin/prometheus, and MetricsMissing says why.
	Metrics        *Metrics `json:"metrics,omitempty"`
	MetricsMissing string   `json:"metricsMissing,omitempty"`
}

// Metrics are a real Prometheus scraping an exporter that plays the demo application
// (fluxenv.Exporter): no kubelet runs in the dev cluster, so no Pod serves requests. The exporter
// follows the image of Deployment PlayedDeployment: its tag is the series' version label, and the
// image's label ErrorRatioLabel the share of requests it answers 500.
type Metrics struct {
	PrometheusURL string `json:"prometheusURL"` // http://127.0.0.1:<port>
	ExporterURL   string `json:"exporterURL"`   // http://127.0.0.1:<port>/metrics
}

const (
	// PlayedDeployment is the Deployment the exporter plays: the demo's dev stage.
	PlayedDeployment = "delivery/podinfo-dev"
	// ErrorRatioLabel is the image config label of the share of requests an image answers 500.
	ErrorRatioLabel = "dev.kcl-artifact-controller.demo/error-ratio"
)

// KCLController describes the kcl-artifact-controller process run by the supervisor.
type KCLController struct {
	Process      fluxenv.PIDInfo `json:"process"`
	Binary       string          `json:"binary"`       // absolute path
	BinarySHA256 string          `json:"binarySHA256"` // of the binary when it was started
	ArtifactURL  string          `json:"artifactURL"`  // http://127.0.0.1:<port>, its artifact server
	UIURL        string          `json:"uiURL"`        // http://127.0.0.1:<port>, its browser view
	StorageDir   string          `json:"storageDir"`
	LogPath      string          `json:"logPath"`
}

// Paths are the files of the dev cluster.
type Paths struct {
	Root          string // repository root
	Dir           string // bin/dev-cluster
	Kubeconfig    string
	State         string // state.json
	PIDFile       string // supervisor.pid
	SupervisorLog string
	Lock          string
}

// GetPaths finds the repository root from the working directory.
func GetPaths() (Paths, error) {
	root, err := fluxenv.RepoRoot()
	if err != nil {
		return Paths{}, err
	}
	dir := filepath.Join(root, "bin", "dev-cluster")
	return Paths{
		Root:          root,
		Dir:           dir,
		Kubeconfig:    filepath.Join(dir, "kubeconfig"),
		State:         filepath.Join(dir, "state.json"),
		PIDFile:       filepath.Join(dir, "supervisor.pid"),
		SupervisorLog: filepath.Join(dir, "supervisor.log"),
		Lock:          filepath.Join(dir, ".lock"),
	}, nil
}

// Rel returns path relative to the repository root when it is inside it.
func (p Paths) Rel(path string) string {
	if r, err := filepath.Rel(p.Root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// Supervisor returns the recorded supervisor and whether it is still running.
func (p Paths) Supervisor() (fluxenv.PIDInfo, bool) {
	var s fluxenv.PIDInfo
	data, err := os.ReadFile(p.PIDFile)
	if err != nil || json.Unmarshal(data, &s) != nil {
		return s, false
	}
	return s, s.Alive()
}

// ReadState reads state.json (whether or not its supervisor still runs).
func (p Paths) ReadState() (*State, error) {
	data, err := os.ReadFile(p.State)
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p.State, err)
	}
	return &s, nil
}

// ErrNotRunning: no supervisor runs, or it has not reported ready.
var ErrNotRunning = errors.New("the dev cluster is not running")

// Running returns the state of the running, ready cluster.
func (p Paths) Running() (*State, error) {
	sup, alive := p.Supervisor()
	if !alive {
		return nil, ErrNotRunning
	}
	st, err := p.ReadState()
	if err != nil || st.Supervisor.PID != sup.PID {
		return nil, fmt.Errorf("%w: its supervisor (pid %d) has not reported ready (see %s)",
			ErrNotRunning, sup.PID, p.Rel(p.SupervisorLog))
	}
	return st, nil
}

// Dead lists the recorded processes that are no longer running.
func (s *State) Dead() []fluxenv.PIDInfo {
	var out []fluxenv.PIDInfo
	for _, pr := range s.Processes {
		if !pr.Alive() {
			out = append(out, pr)
		}
	}
	return out
}

// Describe formats processes as "name (pid N), ...".
func Describe(procs []fluxenv.PIDInfo) string {
	var s []string
	for _, pr := range procs {
		s = append(s, fmt.Sprintf("%s (pid %d)", pr.Name, pr.PID))
	}
	return strings.Join(s, ", ")
}

// SessionMembers lists the live (non-zombie) processes of session sid, as "pid command". The
// supervisor leads its own session, so everything it started, directly or not (control plane,
// controllers, KCL engine workers, git-http-backend), is in it unless it made a session of its own.
func SessionMembers(sid int) []string {
	var out []string
	fluxenv.EachProcess(func(pid int, st fluxenv.ProcStat) {
		if st.Gone() || st.Session != sid {
			return
		}
		name := fluxenv.Cmdline(pid)
		if len(name) > 120 {
			name = name[:120] + "..."
		}
		out = append(out, fmt.Sprintf("%d %s", pid, name))
	})
	return out
}
