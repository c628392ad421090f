# make build   static binaries in bin/ (CGO_ENABLED=0)
# make image   the FROM-scratch image rivet-go:dev
# make up      a 3-node cluster with docker compose, waiting until healthy
# make scale-out  add node4, a node with no etcd member (compose profile "scale")
# make down    stop it (node4 too) and delete its data
# make e2e     the end-to-end tests (real node processes)

COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
IMAGE   ?= rivet-go:dev
NODES   := node1 node2 node3

.PHONY: build image up scale-out down e2e

build:
	CGO_ENABLED=0 go build -trimpath -o bin/rivet-node ./cmd/node
	CGO_ENABLED=0 go build -trimpath -o bin/rivetctl ./cmd/rivetctl

image: build
	docker build -t $(IMAGE) .

up: image
	$(COMPOSE) up -d
	@echo "waiting for $(NODES) to be healthy..."
	@for i in $$(seq 1 90); do \
	  ok=0; for n in $(NODES); do \
	    s=$$(docker inspect -f '{{.State.Health.Status}}' $$($(COMPOSE) ps -q $$n) 2>/dev/null); \
	    [ "$$s" = healthy ] && ok=$$((ok+1)); \
	  done; \
	  if [ $$ok -eq 3 ]; then echo "cluster up: bin/rivetctl --addr localhost:$${RIVET_PORT1:-6420} members"; exit 0; fi; \
	  sleep 2; \
	done; echo "not healthy after 180 s" >&2; $(COMPOSE) ps >&2; exit 1

# --no-deps: node4 depends on node1..3, and without it compose recreates
# them, all at once, wherever this shell's settings (the environment, a TLS
# overlay's COMPOSE_FILE) differ from theirs (a user trial lost TLS so).
scale-out:
	$(COMPOSE) --profile scale up -d --no-deps node4
	@echo "waiting for node4 to be healthy..."
	@for i in $$(seq 1 90); do \
	  s=$$(docker inspect -f '{{.State.Health.Status}}' $$($(COMPOSE) --profile scale ps -q node4) 2>/dev/null); \
	  if [ "$$s" = healthy ]; then echo "node4 up: bin/rivetctl --addr localhost:$${RIVET_PORT4:-6450} members"; exit 0; fi; \
	  sleep 2; \
	done; echo "node4 not healthy after 180 s" >&2; exit 1

down:
	$(COMPOSE) --profile scale down -v

# RIVET_COMPOSE_E2E=1 adds the docker compose test (it builds the image).
e2e:
	RIVET_COMPOSE_E2E=1 go test -count=1 ./test/e2e/
