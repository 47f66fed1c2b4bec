package controller

import (
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	kuberecorder "k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/internal/appliedcache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sourcecache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
)

// KCLArtifactReconciler reconciles KCLArtifact objects.
type KCLArtifactReconciler struct {
	client.Client
	// APIReader reads around the cache, which keeps no managed fields; nil reads the client.
	APIReader client.Reader
	kuberecorder.EventRecorder
	runtimectrl.Metrics

	ControllerName string
	Store          *artifactstore.Store
	Fetcher        *source.Fetcher
	// Sources, when set, stages sources from unpacked trees shared by the renders of a revision.
	Sources *sourcecache.Cache
	// Engine renders KCL in worker processes, one trust domain per namespace.
	Engine *kclworker.Pool
	// Staging holds each render's source and dependencies, per namespace.
	Staging *staging.Area
	// MaxOutput (bytes) and MaxObjects bound a render's output; 0 means no bound.
	MaxOutput, MaxObjects int
	// Deps resolves kcl.mod dependencies; nil renders without resolving them.
	Deps *depfetch.Fetcher
	// Pusher copies artifacts to OCI repositories (spec.publish.oci); nil pushes none.
	Pusher *ocipush.Pusher
	// Checks runs the Prometheus queries of spec.verify; nil verifies nothing (Verified says so).
	Checks *promcheck.Runner
	// EngineVersion is part of every input digest: a new engine renders everything again.
	EngineVersion        string
	NoCrossNamespaceRefs bool
	// ArgumentKinds are the kinds argumentsFrom may read with expressions (--arguments-from-kinds).
	ArgumentKinds *arguments.Kinds
	// NoImagePolicies is set when the API server does not serve ImagePolicies: none is watched.
	NoImagePolicies bool
	// RuntimeNamespace is the namespace the controller runs in: the line stopped there
	// (kcl.contrib.fluxcd.io/stop-the-line) is stopped for every namespace.
	RuntimeNamespace string
	// Renders counts renders (of a KCLArtifact of namespace), so tests can prove an unchanged
	// input is not rendered again.
	Renders func(namespace string)
	// Bounds are the operator's limits on time, intervals and held output.
	Bounds Bounds

	running  inflight
	failures failureCounts
	applied  appliedcache.Cache
	shared   sharedRenders
	writes   patch.OwnWrites
	advanced advancedPhases
	signers  signerCache
	backoff  registryBackoff
	renders  renderRecords
}
