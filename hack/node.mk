# A real node on this machine (test/kubenode, test/cmd/node): kubelet, containerd and runc run the
# Pods of Flux's controllers, of this controller and of the workloads it deploys. Included by the
# Makefile, which defines GO, BIN and the build and testbin targets.

IMAGE_VERSION ?= dev
# The release the node suite installs first and then upgrades to this tree's image through a Flux
# platform repository (test/node upgrade_test.go): the last commit before issue 36's work.
PREVIOUS_RELEASE ?= 2f437bb24f337d45258b8f504c66c52125eee97e

.PHONY: nodebin image previous-release node node-down demo-node demo-node-down test-node

## nodebin: kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl, containerd, runc, CoreDNS and kube-router built from source into bin/ (cached by version)
nodebin: testbin
	@bash hack/nodebin.sh

## image: OCI images without a Docker daemon (this controller, source-controller, kustomize-controller, image-reflector-controller, pause, the demo app) into bin/images; loaded into the demo node when it runs
image: build build-plugin testbin
	@$(GO) run ./test/cmd/image --out $(BIN)/images --version $(IMAGE_VERSION) all
	@if [ -f $(BIN)/node-demo.json ]; then $(GO) run ./test/cmd/node load $(BIN)/images/*.tar; fi

## previous-release: the binary, image and config/ of PREVIOUS_RELEASE into bin/previous-<sha> (cached by commit)
previous-release: build
	@PREVIOUS_RELEASE=$(PREVIOUS_RELEASE) bash hack/previous-release.sh

## node: start a real node in the background (prints the KUBECONFIG to export)
node: nodebin
	@$(GO) run ./test/cmd/node up

## node-down: stop the node and remove everything it left (processes, mounts, cgroups, namespaces, sysctls)
node-down:
	@$(GO) run ./test/cmd/node down

## demo-node: the node, Flux and this controller installed as users install them, and the demo application delivered through three stages (dev verified by its error rate in a Prometheus inside the node, staging, prod approved by a person), a failing release rolled back in dev
demo-node: build testbin nodebin image prometheus
	@$(GO) run ./test/cmd/node up --demo

## demo-node-down: stop the demo node
demo-node-down: node-down

## test-node: only the node suite (test/node), verbose
test-node: build testbin nodebin image previous-release
	$(TEST_ENV) $(GO) test -count=1 -timeout 45m -v ./test/node/
