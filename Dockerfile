# The node image: two static binaries and nothing else, so it builds with no
# registry (there is no base image to pull). `make image` builds the
# binaries first (CGO_ENABLED=0) into bin/.
FROM scratch
COPY bin/rivet-node /rivet-node
COPY bin/rivetctl /rivetctl
VOLUME /data
EXPOSE 6420 6421 7946 7946/udp 2379 2380
ENTRYPOINT ["/rivet-node"]
