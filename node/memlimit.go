package node

import (
	"errors"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"go.uber.org/zap"
)

// memLimitRatio is the share of the container's memory the Go runtime aims
// to stay under. The rest is room for what the runtime's limit does not
// count or cannot hold back at once: the embedded etcd member's database,
// which it maps into memory (its pages count towards the container's
// memory, and the kernel can drop them), and a heap that is briefly over
// the soft limit while the collector catches up.
const memLimitRatio = 0.8

// SetMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// 80% of the memory limit of the container (the cgroup) the process runs
// in, and logs it. Main calls it; a program that runs nodes through Run
// calls it once, if it wants it, as it concerns the whole process.
//
// Without it the runtime knows nothing of the container's limit: with
// GOGC at 100 the heap grows to twice what is live before a collection,
// and a node whose live heap is a little over half its container's memory
// is killed by the kernel (OOM, losing its lease and every actor in
// memory at once) where a collection would have kept it under. With it,
// the collector runs more often as the heap nears the limit instead.
//
// GOMEMLIMIT set in the environment is kept as it is, and AUTOMEMLIMIT
// sets another ratio (0.5 for half) or turns this off ("off"), as the
// github.com/KimMachineGun/automemlimit package, which reads the cgroup's
// limit here, takes them. No limit, or no cgroup (a process outside a
// container, or not on Linux), leaves the runtime as it was.
func SetMemoryLimit(log *zap.Logger) {
	setMemoryLimit(log, memlimit.FromCgroup)
}

// setMemoryLimit is SetMemoryLimit with the container's limit read by
// memoryOf.
func setMemoryLimit(log *zap.Logger, memoryOf memlimit.Provider) {
	if log == nil {
		log = zap.NewNop()
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", zap.String("gomemlimit", v), zap.Int64("bytes", debug.SetMemoryLimit(-1)))
		return
	}
	ratio := memLimitRatio
	switch v := os.Getenv("AUTOMEMLIMIT"); v {
	case "":
	case "off":
		log.Info("memory limit: none set (AUTOMEMLIMIT=off)")
		return
	default:
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0 && r <= 1) {
			log.Warn("memory limit: none set: AUTOMEMLIMIT is neither off nor a ratio in (0, 1]", zap.String("automemlimit", v))
			return
		}
		ratio = r
	}
	container, err := memoryOf()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit):
		return // nothing to follow
	case err != nil:
		// No cgroup to read a limit from (not in a container, not on
		// Linux): nothing to say above DEBUG on every laptop's start.
		log.Debug("memory limit: none read from a cgroup", zap.Error(err))
		return
	}
	limit := int64(float64(container) * ratio)
	debug.SetMemoryLimit(limit)
	log.Info("memory limit: GOMEMLIMIT set from the container's", zap.Int64("gomemlimit_bytes", limit), zap.Uint64("container_bytes", container), zap.Float64("ratio", ratio))
}
