# indexed-batch-job Makefile, in the kubebuilder go/v4 shape.

IMG ?= indexed-batch-job:latest
K8S_VERSION ?= v1.36.3
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

.PHONY: manifests
manifests: ## Generate the CRD (with the CEL rules controller-gen cannot place) and RBAC.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:generateEmbeddedObjectMeta=true webhook paths="./..." output:crd:artifacts:config=config/crd/bases
	$(CRD_PATCH) $(CURDIR)/config/crd/bases/batch.indexedjob.dev_indexedbatchjobs.yaml

.PHONY: generate
generate: ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: controlplane
controlplane: ## Build the pinned etcd, kube-apiserver and kubectl into bin/ (once; minutes on 2 cores).
	@if [ "$(KUBEBUILDER_ASSETS)" = "$(LOCALBIN)/k8s/$(K8S_VERSION)" ]; then hack/build-controlplane.sh etcd kube-apiserver kubectl; fi

.PHONY: test
test: manifests generate vet controlplane ## Run unit tests (with the fuzz seed corpora) and the envtest integration suites.
	go test -race -count=1 ./api/... ./internal/... ./cmd/...
	go test -count=1 -timeout 40m ./test/integration/...

.PHONY: verify
verify: manifests generate ## Fail if generated files are out of date.
	@git diff --exit-code -- api config || { echo "generated files changed: run make manifests generate and commit"; exit 1; }
	@test -z "$$(gofmt -l api cmd internal test hack)" || { echo "gofmt needed:"; gofmt -l api cmd internal test hack; exit 1; }

##@ Build

.PHONY: build
build: generate ## Build the manager binary.
	go build -o bin/manager ./cmd

.PHONY: run
run: manifests generate ## Run the controller against the cluster in ~/.kube/config.
	go run ./cmd

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build -t $(IMG) .
