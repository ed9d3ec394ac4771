# indexed-batch-job Makefile, in the kubebuilder go/v4 shape.

IMG ?= indexed-batch-job:latest
K8S_VERSION ?= v1.37.2
LOCALBIN ?= $(shell pwd)/bin
# envtest's control plane: an existing KUBEBUILDER_ASSETS is honoured,
# otherwise the pinned binaries hack/build-controlplane.sh builds.
KUBEBUILDER_ASSETS ?= $(LOCALBIN)/k8s/$(K8S_VERSION)
export KUBEBUILDER_ASSETS

CONTROLLER_GEN ?= go tool -modfile=hack/tools/go.mod controller-gen
CRD_PATCH ?= cd hack/tools && go run ./crdpatch

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

# SKIP_CODEGEN=1: manifests and generate do nothing. hack/ci.sh sets it once
# make verify has shown the generated files are committed as generated, so
# that suites running side by side do not rewrite files the other reads.
SKIP_CODEGEN ?=

.PHONY: manifests
manifests: ## Generate the CRD (with the CEL rules controller-gen cannot place) and RBAC.
ifeq ($(SKIP_CODEGEN),)
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:generateEmbeddedObjectMeta=true webhook paths="{./api/...,./internal/...,./cmd/...}" output:crd:artifacts:config=config/crd/bases
	$(CRD_PATCH) $(CURDIR)/config/crd/bases/batch.indexedjob.dev_indexedbatchjobs.yaml
endif

.PHONY: generate
generate: ## Generate DeepCopy methods.
ifeq ($(SKIP_CODEGEN),)
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="{./api/...,./internal/...,./cmd/...}"
endif

GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

.PHONY: golangci-lint
golangci-lint: ## Install the pinned golangci-lint into bin/ (once; several minutes on 2 cores).
	@test -x "$(GOLANGCI_LINT)" || command -v "$(GOLANGCI_LINT)" >/dev/null || \
	  GOBIN=$(dir $(GOLANGCI_LINT)) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (.golangci.yml, kubebuilder's linters).
	$(GOLANGCI_LINT) run ./...

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint and apply the fixes it can.
	$(GOLANGCI_LINT) run --fix ./...

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

# What make controlplane builds. CI adds the node cluster's binaries
# (NODE_BINARIES), so that one go build compiles the packages they share.
CONTROLPLANE ?= etcd kube-apiserver kubectl
NODE_BINARIES = etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kube-proxy kubelet

.PHONY: controlplane
controlplane: ## Build the pinned etcd, kube-apiserver and kubectl (CONTROLPLANE) into bin/ (once; minutes on 2 cores).
	@if [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh $(CONTROLPLANE); fi

.PHONY: test
# -race where the code runs goroutines of its own: the operator and its
# packages. The API types, the docs, the test harness and the benchmark's
# packages run without it, which spares a race build of every package only
# they import (Kueue's controllers, the plotting library).
RACE_PACKAGES ?= ./internal/... ./cmd/...
PLAIN_PACKAGES ?= ./api/... ./test/harness/... ./test/bench/... ./docs/...

test: manifests generate vet controlplane ## Run unit tests (with the fuzz seed corpora) and the envtest integration suites.
	go test -race -count=1 $(RACE_PACKAGES)
	go test -count=1 $(PLAIN_PACKAGES)
	go test -count=1 -timeout 40m ./test/integration/...

# Each fuzz target runs for FUZZTIME (default 10m); CI runs a short time per target.
FUZZTIME ?= 10m

.PHONY: fuzz
fuzz: ## Run every Go fuzz target for FUZZTIME each (default 10m); crashers land in the package's testdata/fuzz/.
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

.PHONY: verify
verify: manifests generate helm-manifests ## Fail if generated files (and the chart's copies of them) are out of date.
	@git diff --exit-code -- api config charts || { echo "generated files changed: run make manifests generate and commit"; exit 1; }
	@test -z "$$(gofmt -l api cmd internal test hack)" || { echo "gofmt needed:"; gofmt -l api cmd internal test hack; exit 1; }

##@ Build

.PHONY: build
build: generate ## Build the manager, bin/manager (its Kueue integration starts in process once Kueue is installed).
	go build -o bin/manager ./cmd

.PHONY: install-plugin
install-plugin: ## Install the kubectl plugin kubectl-ibj (`kubectl ibj`) into $GOBIN if set, else bin/.
	GOBIN=$${GOBIN:-$(LOCALBIN)} go install ./cmd/kubectl-ibj
	@echo "kubectl ibj works once $${GOBIN:-$(LOCALBIN)} is on your PATH"

.PHONY: run
run: manifests generate ## Run the controller against the cluster in ~/.kube/config.
	go run ./cmd

.PHONY: docker-build
docker-build: ## Build the manager image with a Docker engine (make image needs none).
	docker build -t $(IMG) .

# The image: a static manager per platform, assembled as an OCI image layout
# by hack/tools/image (go-containerregistry) with every timestamp set to the
# commit's time, so that two builds of one commit have one digest.
VERSION ?= v0.0.0-dev
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_DIR ?= dist/image
ifndef SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
endif
CRANE ?= go tool -modfile=hack/tools/go.mod crane

.PHONY: image
image: ## Build the manager's OCI image (IMAGE_PLATFORMS, tag VERSION) into IMAGE_DIR, with no container engine or registry.
	@mkdir -p dist/.image
	@for p in $(IMAGE_PLATFORMS); do \
	  echo "go build ./cmd for $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build -trimpath -buildvcs=false -ldflags="-s -w" \
	    -o dist/.image/manager-$${p%/*}-$${p#*/} ./cmd || exit 1; \
	done
	cd hack/tools && go run ./image -out $(CURDIR)/$(IMAGE_DIR) -tag $(VERSION) -created $(SOURCE_DATE_EPOCH) \
	  $(foreach p,$(IMAGE_PLATFORMS),-binary $(p)=$(CURDIR)/dist/.image/manager-$(subst /,-,$(p)))

.PHONY: test-image
test-image: image controlplane kwok ## Check the image (twice built, one digest; pushed with crane to a local registry), its layout, and run its entrypoint as nonroot on a read-only root as a kwok cluster's operator (needs root).
	$(MAKE) --no-print-directory image IMAGE_DIR=dist/.image/again SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH)
	@cmp -s $(IMAGE_DIR)/index.json dist/.image/again/index.json || \
	  { echo "two builds of one commit gave two image digests"; diff $(IMAGE_DIR)/index.json dist/.image/again/index.json; exit 1; }
	@echo "two builds, one digest: $$(grep -o 'sha256:[0-9a-f]*' $(IMAGE_DIR)/index.json)"
	hack/test-image-push.sh $(CURDIR)/$(IMAGE_DIR)
	IBJ_IMAGE=$(CURDIR)/$(IMAGE_DIR) go test -count=1 -v ./test/image

.PHONY: image-push
image-push: ## Push the image in IMAGE_DIR to IMG with crane (credentials from ~/.docker/config.json).
	@test -f $(IMAGE_DIR)/index.json || { echo "no image in $(IMAGE_DIR): run make image"; exit 1; }
	$(CRANE) push $(IMAGE_DIR) $(IMG)

##@ Deployment

KUSTOMIZE_VERSION ?= v5.8.0
HELM_VERSION ?= v3.22.0
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)/kustomize
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)/helm
KUBECTL ?= $(LOCALBIN)/k8s/$(K8S_VERSION)/kubectl
CHART ?= charts/indexed-batch-job
ignore-not-found ?= false
# What build-installer, deploy and undeploy install: config/default (the
# operator issues its webhook certificate) or config/certmanager (cert-manager
# does).
INSTALL_CONFIG ?= config/default

# INSTALL_CONFIG with the manager image set to IMG, built through a throwaway
# overlay under dist/ so that no tracked file is edited (config/manager names
# the image indexed-batch-job:latest, which the overlay replaces).
define kustomize-default
overlay=$$(mkdir -p dist && mktemp -d dist/.overlay.XXXXXX); trap 'rm -rf "$$overlay"' EXIT; \
(cd "$$overlay" && $(KUSTOMIZE) create --resources ../../$(INSTALL_CONFIG) && $(KUSTOMIZE) edit set image indexed-batch-job=$(IMG)); \
$(KUSTOMIZE) build "$$overlay"
endef

.PHONY: build-installer
build-installer: manifests kustomize ## Write dist/install.yaml (CRD, RBAC, manager, metrics and webhook Services, webhook configurations) with the image IMG.
	@$(kustomize-default) > dist/install.yaml
	@echo "wrote dist/install.yaml with image $(IMG); apply it with: kubectl apply -f dist/install.yaml"

.PHONY: install
install: manifests kustomize kubectl ## Install the CRD into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply -f -

.PHONY: uninstall
uninstall: manifests kustomize kubectl ## Remove the CRD, and with it every IndexedBatchJob. ignore-not-found=true ignores missing objects.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize kubectl ## Deploy the operator (INSTALL_CONFIG, default config/default; image IMG) to the cluster of the current kubeconfig.
	$(kustomize-default) | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: kustomize kubectl ## Remove what deploy created, the CRD included. ignore-not-found=true ignores missing objects.
	$(kustomize-default) | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: helm-manifests
helm-manifests: manifests ## Copy the generated CRD, manager ClusterRole and webhook configurations into the Helm chart.
	rm -f $(CHART)/files/crds/*.yaml
	cp config/crd/bases/*.yaml $(CHART)/files/crds/
	cp config/rbac/role.yaml $(CHART)/files/rbac/role.yaml
	cp config/webhook/manifests.yaml $(CHART)/files/webhook/manifests.yaml

.PHONY: helm-lint
helm-lint: helm helm-manifests ## Lint the Helm chart.
	$(HELM) lint --strict $(CHART)

.PHONY: helm-package
helm-package: helm helm-manifests ## Package the Helm chart into dist/.
	$(HELM) package $(CHART) --destination dist

.PHONY: kustomize
kustomize: ## Install the pinned kustomize into bin/.
	@test -x "$(KUSTOMIZE)" || command -v "$(KUSTOMIZE)" >/dev/null || \
	  GOBIN=$(dir $(KUSTOMIZE)) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

.PHONY: helm
helm: ## Install the pinned Helm into bin/ (once; about 5 minutes on 2 cores).
	@test -x "$(HELM)" || command -v "$(HELM)" >/dev/null || \
	  GOBIN=$(dir $(HELM)) go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: kubectl
kubectl: ## Build the pinned kubectl into bin/ if missing (unless KUBECTL is overridden).
	@if [ "$(KUBECTL)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)/kubectl" ]; then hack/build-controlplane.sh kubectl; fi

##@ Release

# Where the release's install.yaml, chart and image point.
IMAGE_REPO ?= ghcr.io/indexed-batch-job/indexed-batch-job
RELEASE_DIR ?= dist/release

.PHONY: release
release: override IMG = $(IMAGE_REPO):$(VERSION)
release: manifests kustomize helm ## Write release VERSION (vX.Y.Z) into RELEASE_DIR: install.yaml and chart pinned to IMAGE_REPO:VERSION, the image layout, kubectl-ibj archives, SHA256SUMS.
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$ ]] || { echo "usage: make release VERSION=vX.Y.Z (got $(VERSION))"; exit 1; }
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	@echo "install.yaml with image $(IMAGE_REPO):$(VERSION)"
	@$(kustomize-default) > $(RELEASE_DIR)/install.yaml
	@grep -q "image: $(IMAGE_REPO):$(VERSION)$$" $(RELEASE_DIR)/install.yaml
	@echo "the Helm chart, version $(VERSION:v%=%), image $(IMAGE_REPO):$(VERSION) by default"
	@chart=$$(mktemp -d); trap 'rm -rf "$$chart"' EXIT; cp -r $(CHART) "$$chart/"; \
	  sed -i 's|^  repository: indexed-batch-job$$|  repository: $(IMAGE_REPO)|' "$$chart/$(notdir $(CHART))/values.yaml"; \
	  grep -q '^  repository: $(IMAGE_REPO)$$' "$$chart/$(notdir $(CHART))/values.yaml"; \
	  $(HELM) package "$$chart/$(notdir $(CHART))" --version $(VERSION:v%=%) --app-version $(VERSION) --destination $(RELEASE_DIR)
	$(MAKE) --no-print-directory image VERSION=$(VERSION) IMAGE_DIR=dist/.image/release SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH)
	tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
	  -C dist/.image/release -cf $(RELEASE_DIR)/indexed-batch-job-image-$(VERSION).oci.tar .
	hack/krew/release.sh $(VERSION)
	cp dist/krew/* $(RELEASE_DIR)/
	cp CHANGELOG.md $(RELEASE_DIR)/
	cd $(RELEASE_DIR) && sha256sum $$(ls | grep -v SHA256SUMS) > SHA256SUMS
	@echo "wrote $(RELEASE_DIR):"; ls -l $(RELEASE_DIR)

.PHONY: test-release
test-release: ## Make a release (VERSION=v0.0.0-test unless given) and check what it wrote.
	$(MAKE) --no-print-directory release VERSION=$(if $(filter v0.0.0-dev,$(VERSION)),v0.0.0-test,$(VERSION))
	HELM=$(HELM) hack/check-release.sh $(RELEASE_DIR) $(IMAGE_REPO) $(if $(filter v0.0.0-dev,$(VERSION)),v0.0.0-test,$(VERSION))

##@ Demo and end-to-end

KWOK_VERSION ?= v0.8.0
KWOK ?= $(LOCALBIN)/kwok-$(KWOK_VERSION)/kwok
# Where test/harness/kwokcluster finds kwok.
export KWOK_BIN = $(KWOK)

.PHONY: kwok
kwok: $(KWOK) ## Install the pinned kwok into bin/ (once; minutes on 2 cores).
$(KWOK):
	@echo "installing kwok $(KWOK_VERSION) into $(dir $(KWOK)); the first build takes a few minutes..."
	GOBIN=$(dir $(KWOK)) go install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

# Kueue's own manager at the version go.mod requires, for the e2e spec that runs
# it as a deployment would (test/e2e/kueue_test.go). Built static (it runs
# chrooted) and -trimpath, as make image builds the operator: the libraries
# both link at the same versions are compiled once.
ifndef KUEUE_VERSION
KUEUE_VERSION := $(shell go list -m -f '{{.Version}}' sigs.k8s.io/kueue)
endif
KUEUE_MANAGER ?= $(LOCALBIN)/kueue-$(KUEUE_VERSION)/kueue

.PHONY: kueue-manager
kueue-manager: $(KUEUE_MANAGER) ## Install Kueue's manager (cmd/kueue, at go.mod's version) into bin/ (once; minutes on 2 cores).
$(KUEUE_MANAGER):
	@echo "installing Kueue's manager $(KUEUE_VERSION) into $(dir $(KUEUE_MANAGER)); the first build takes a few minutes..."
	CGO_ENABLED=0 GOBIN=$(dir $(KUEUE_MANAGER)) go install -trimpath sigs.k8s.io/kueue/cmd/kueue@$(KUEUE_VERSION)

# The e2e suite's control plane: kube-scheduler too, for its gang specs, and
# kube-controller-manager, for the differential spec's built-in Job controller.
E2E_CONTROLPLANE ?= etcd kube-apiserver kubectl kube-scheduler kube-controller-manager

.PHONY: e2e-binaries
e2e-binaries: ## Build what the e2e suite runs: control plane (with kube-scheduler), kwok, bin/manager, bin/kubectl-ibj, bin/kwok-cluster (LOCALBIN, default bin/).
	@# Side by side: on a cold build cache each build has serial stretches
	@# (a large package, a link) that the others fill.
	$(MAKE) --no-print-directory -j3 controlplane kwok operator-binaries CONTROLPLANE="$(E2E_CONTROLPLANE)"

.PHONY: operator-binaries
operator-binaries: ## Build bin/manager, bin/kubectl-ibj and bin/kwok-cluster.
	go build -o $(LOCALBIN)/manager ./cmd
	go build -o $(LOCALBIN)/ ./cmd/kubectl-ibj ./test/harness/cmd/kwok-cluster

.PHONY: demo-binaries
demo-binaries: ## Build what the demo runs: control plane, bin/manager, bin/kubectl-ibj, bin/kwok-cluster (its pods run on the pod simulator: no kwok).
	$(MAKE) --no-print-directory -j2 controlplane operator-binaries

# NODE=real: the demo on real containers (make node-cluster, NODES nodes;
# needs root).
NODE ?=

# GANG=1: the gang sample, on a cluster serving the Workload API with the
# real kube-scheduler and kwok's nodes.
GANG ?=

.PHONY: demo
demo: $(if $(filter real,$(NODE)),node-prereqs node-binaries node-images,demo-binaries) $(if $(GANG),kwok) ## Run the per-index sample on a throwaway local cluster (fake nodes; NODE=real: real containers, as root; GANG=1: the gang sample, kube-scheduler placing it), live; KEEP=1 leaves it running.
	@case "$(NODE)" in ""|real) ;; *) echo "NODE must be real or empty, not $(NODE)"; exit 2 ;; esac
	@if [ -n "$(GANG)" ] && [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh kube-scheduler; fi
	DEMO_GANG=$(if $(GANG),1,0) KEEP=$(KEEP) LOCALBIN=$(LOCALBIN) NODE_IMAGES=$(CURDIR)/$(NODE_IMAGES) NODES=$(NODES) $(if $(filter real,$(NODE)),hack/demo/node-demo.sh,hack/demo/demo.sh)

.PHONY: demo-kueue
demo-kueue: demo-binaries ## Run two jobs queued by Kueue (its CRDs from the module cache, its controllers in process) on a throwaway local cluster (fake nodes); KEEP=1 leaves it running.
	go build -o $(LOCALBIN)/kueue-demo ./test/harness/cmd/kueue-demo
	DEMO_KUEUE=1 KEEP=$(KEEP) LOCALBIN=$(LOCALBIN) hack/demo/demo.sh

# E2E_LABELS: a Ginkgo label filter for test-e2e ('!tenant', 'chaos || fleet').
E2E_LABELS ?=

.PHONY: test-e2e
test-e2e: e2e-binaries kueue-manager ## Run the end-to-end suite: the operator binary (and Kueue's manager) against a kwok cluster, driven through the API and kubectl.
	IBJ_E2E=1 IBJ_MANAGER=$(LOCALBIN)/manager IBJ_PLUGIN=$(LOCALBIN)/kubectl-ibj IBJ_KUEUE_MANAGER=$(KUEUE_MANAGER) go test -count=1 -timeout 100m ./test/e2e -v -ginkgo.v \
	  $(if $(E2E_LABELS),-ginkgo.label-filter='$(E2E_LABELS)' -ginkgo.fail-on-empty)

# MultiKueue (test/multikueue): a manager cluster and two workers, each a
# kwok cluster with kube-controller-manager's garbage collector, Kueue's
# released manager and the operator binary. Needs root (Kueue runs chrooted).
.PHONY: test-multikueue
test-multikueue: e2e-binaries kueue-manager ## Run the MultiKueue suite: jobs created on a manager cluster, dispatched by Kueue's MultiKueue to one of two worker clusters.
	@if [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh kube-controller-manager; fi
	IBJ_E2E=1 IBJ_MANAGER=$(LOCALBIN)/manager IBJ_KUEUE_MANAGER=$(KUEUE_MANAGER) go test -count=1 -timeout 30m ./test/multikueue -v -ginkgo.v

.PHONY: demo-multikueue
demo-multikueue: e2e-binaries kueue-manager ## Run one job through MultiKueue: created on a manager cluster, run on a worker (three local clusters, fake nodes; as root); KEEP=1 leaves them running.
	@if [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh kube-controller-manager; fi
	go build -o $(LOCALBIN)/multikueue-cluster ./test/harness/cmd/multikueue-cluster
	KEEP=$(KEEP) LOCALBIN=$(LOCALBIN) KUEUE_MANAGER=$(KUEUE_MANAGER) hack/demo/multikueue-demo.sh

##@ A real node

# The node cluster (test/harness/nodecluster): the control plane with
# kube-controller-manager and kube-scheduler, and NODES nodes, each a
# kubelet on a containerd of its own (Debian's containerd and runc) and a
# kube-proxy, each in a network namespace of its own. Needs root. Nothing
# is pulled: make node-images writes the images it imports.
NODES ?= 2
NODE_IMAGES ?= dist/node-images
NODE_ARCH ?= $(shell go env GOARCH)
NODE_DIR ?= $(LOCALBIN)/node-cluster

.PHONY: node-prereqs
node-prereqs: ## Install Debian's containerd, runc, CNI plugins, iptables and iproute2 (apt-get, as root), if missing.
	@missing=""; \
	for c in containerd:containerd containerd-shim-runc-v2:containerd runc:runc ctr:containerd iptables:iptables ip:iproute2 nsenter:util-linux pkill:procps; do \
	  command -v "$${c%%:*}" >/dev/null || missing="$$missing $${c#*:}"; \
	done; \
	test -x /usr/lib/cni/bridge || missing="$$missing containernetworking-plugins"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

.PHONY: node-binaries
node-binaries: ## Build the node cluster's Kubernetes binaries (the control plane, kube-controller-manager, kube-scheduler, kube-proxy, kubelet), bin/node-cluster and bin/faulty-runc (a broken node's runc).
	@if [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh $(NODE_BINARIES); fi
	go build -o $(LOCALBIN)/ ./cmd/kubectl-ibj ./test/harness/cmd/node-cluster
	CGO_ENABLED=0 go build -o $(LOCALBIN)/ ./test/harness/cmd/faulty-runc

.PHONY: node-images
node-images: build-installer-node ## Build the node cluster's images as OCI layouts in NODE_IMAGES: the pod sandbox (pause), the specs' workload (worker) and the manager (make image, for this host's platform).
	@mkdir -p dist/.image
	@for n in pause worker; do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$(NODE_ARCH) go build -trimpath -buildvcs=false -ldflags="-s -w" \
	    -o dist/.image/$$n-linux-$(NODE_ARCH) ./test/nodeimages/$$n || exit 1; \
	  (cd hack/tools && go run ./image -out $(CURDIR)/$(NODE_IMAGES)/$$n -tag v1 -name $$n -created $(SOURCE_DATE_EPOCH) \
	    -binary linux/$(NODE_ARCH)=$(CURDIR)/dist/.image/$$n-linux-$(NODE_ARCH)) || exit 1; \
	done
	$(MAKE) --no-print-directory image IMAGE_PLATFORMS=linux/$(NODE_ARCH) IMAGE_DIR=$(NODE_IMAGES)/manager VERSION=$(NODE_MANAGER_VERSION)

# The tag the node cluster's manager image has, and the install.yaml that
# names it (dist/node-images/install.yaml).
NODE_MANAGER_VERSION ?= v0.0.0-node

.PHONY: build-installer-node
build-installer-node: manifests kustomize
	@mkdir -p $(NODE_IMAGES)
	@$(MAKE) --no-print-directory build-installer IMG=indexed-batch-job:$(NODE_MANAGER_VERSION) >/dev/null
	@mv dist/install.yaml $(NODE_IMAGES)/install.yaml

.PHONY: node-cluster
node-cluster: node-prereqs node-binaries node-images ## Run the cluster of NODES real nodes (real containers) until Ctrl-C; its kubeconfig is NODE_DIR/kubeconfig (needs root).
	$(LOCALBIN)/node-cluster --dir $(NODE_DIR) --images $(NODE_IMAGES) --nodes $(NODES)

.PHONY: test-node
test-node: node-prereqs node-binaries node-images helm ## Run the node specs (test/node) on NODES real nodes: the operator installed from install.yaml and by helm as a pod of its own image, jobs on real containers beside batch/v1 Jobs, nodes lost and kubelets and containerds restarted (needs root).
	IBJ_NODE=1 IBJ_NODE_NODES=$(NODES) IBJ_NODE_IMAGES=$(CURDIR)/$(NODE_IMAGES) IBJ_HELM=$(HELM) go test -count=1 -timeout 40m ./test/node -v -ginkgo.v

##@ Supported Kubernetes versions

# The supported-versions matrix: the oldest supported kube-apiserver and the
# newest (K8S_VERSION). Each builds from the hack/controlplane*/ module that
# requires its k8s.io/kubernetes, into bin/k8s/<version>/.
COMPAT_OLDEST ?= v1.33.13
COMPAT_VERSIONS ?= $(COMPAT_OLDEST) $(K8S_VERSION)
# One minor below the oldest supported, where the CRD must be refused (empty
# skips it).
COMPAT_BELOW ?= v1.32.13
# The next minor's pre-release (hack/controlplane-next, built with the Go
# toolchain its go.mod names), checked by make test-full.
COMPAT_NEXT ?= v1.38.0-beta.0
# COMPAT_FULL=1: every integration suite and the whole e2e suite at each
# version, instead of the validation suite and the seed example.
COMPAT_FULL ?=

.PHONY: test-compat
test-compat: kwok ## Run the CRD validation suite and the e2e seed example against each of COMPAT_VERSIONS, and check that COMPAT_BELOW refuses the CRD.
	COMPAT_VERSIONS="$(COMPAT_VERSIONS)" COMPAT_BELOW="$(COMPAT_BELOW)" COMPAT_FULL="$(COMPAT_FULL)" hack/test-compat.sh

##@ Benchmarks

# BENCH_QUICK=1: only the 1,000-index workload, once, into bin/bench-quick
# (a smoke test that leaves docs/bench alone). BENCH_ARGS passes flags to
# test/bench (for example -repeats 1 -skip-big -big-upstream=false).
BENCH_OUT ?= $(if $(BENCH_QUICK),$(LOCALBIN)/bench-quick,docs/bench)

.PHONY: bench
bench: ## Benchmark the operator against the built-in Job controller side by side; writes docs/bench/ (BENCH_QUICK=1: smoke test).
	@if [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh etcd kube-apiserver kube-controller-manager; fi
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o $(LOCALBIN)/bench-manager ./cmd
	go build -o $(LOCALBIN)/bench ./test/bench
	$(LOCALBIN)/bench -out $(BENCH_OUT) -manager $(LOCALBIN)/bench-manager -assets $(KUBEBUILDER_ASSETS) $(if $(BENCH_QUICK),-quick) $(BENCH_ARGS)

##@ Test tiers

# The Go binaries the suites run, in one go build: the operator, the plugin
# and the harness's cluster commands. faulty-runc (a bad node's runc) is
# built apart, without cgo: it runs inside the containers it breaks.
HARNESS_COMMANDS = ./cmd/kubectl-ibj ./test/harness/cmd/kwok-cluster ./test/harness/cmd/node-cluster \
  ./test/harness/cmd/multikueue-cluster ./test/harness/cmd/kueue-demo

.PHONY: ci-binaries
ci-binaries: ## Build every binary the test tiers run, once, side by side: Kubernetes' (NODE_BINARIES), kwok, Kueue's manager, Helm, kustomize, golangci-lint, the operator's and the node images.
	@# On a cold build cache each build has serial stretches (a large
	@# package, a link) that the others fill.
	$(MAKE) --no-print-directory -j4 controlplane CONTROLPLANE="$(NODE_BINARIES)" kwok kueue-manager helm kustomize golangci-lint go-binaries
	$(MAKE) --no-print-directory node-images

.PHONY: go-binaries
go-binaries:
	go build -o $(LOCALBIN)/manager ./cmd
	go build -o $(LOCALBIN)/ $(HARNESS_COMMANDS)
	CGO_ENABLED=0 go build -o $(LOCALBIN)/ ./test/harness/cmd/faulty-runc

.PHONY: test-ci
test-ci: ## What CI runs (.ci/run): every suite and demo, the e2e fleet and chaos specs at CI sizes, against K8S_VERSION; each step timed (hack/ci.sh, docs/bench/ci.md).
	hack/ci.sh ci

.PHONY: test-full
test-full: ## Everything at full size: the e2e specs at docs/guarantees.md's sizes, every tenant budget, and the supported-versions checks at both ends, below and at the next minor (hours; needs root).
	hack/ci.sh full
