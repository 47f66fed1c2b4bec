# The KCL demo on the local dev cluster (test/cmd/devcluster, test/cmd/demo): the control plane,
# source-controller, kustomize-controller, image-reflector-controller, the Git server serving
# fixtures/ and this controller (bin/kcl-artifact-controller run), all under one supervisor; then, in namespace demo, a
# GitRepository for demo.git and a KCLArtifact podinfo rendering fixtures/demo with env=prod (and
# the same from OCI and S3); in namespace delivery, an ImagePolicy and three stages (dev, staging
# after a soak, prod after an approval) following the image tag the demo pushes.
# State, kubeconfig and logs live in bin/dev-cluster/. Included by the Makefile, which defines GO,
# BIN and the build and testbin targets.

.PHONY: demo demo-down

## demo: run the dev cluster with this controller (or reuse it), apply the demo, wait until it is applied and show it
demo: build
	@TESTBIN_DEFAULT_LINE_ONLY=1 bash hack/testbin.sh
	@$(GO) run ./test/cmd/devcluster up --brief --with-kcl-controller $(BIN)/kcl-artifact-controller
	@$(GO) run ./test/cmd/demo

## demo-down: stop everything make demo started (the supervisor and every process of its session)
demo-down:
	@$(GO) run ./test/cmd/devcluster down
