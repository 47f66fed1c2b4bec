# Persistent local Flux dev cluster (test/cmd/devcluster, built on test/fluxenv): envtest control
# plane, Flux CRDs and this project's CRDs, source-controller, kustomize-controller
# (--feature-gates=ExternalArtifact=true), and a Git server serving fixtures/<name> as <name>.git.
# State, kubeconfig and logs live in bin/dev-cluster/. Included by the Makefile, which defines GO,
# BIN and the testbin target.

.PHONY: dev-cluster dev-cluster-down dev-cluster-status

## dev-cluster: start the dev cluster in the background (or show it if it runs); prints the KUBECONFIG to export
dev-cluster: testbin
	$(GO) run ./test/cmd/devcluster up

## dev-cluster-down: stop everything dev-cluster started
dev-cluster-down:
	$(GO) run ./test/cmd/devcluster down

## dev-cluster-status: whether the dev cluster runs, its addresses and processes
dev-cluster-status:
	$(GO) run ./test/cmd/devcluster status
