package restore

import "context"

// SetDrillStepHook sets a hook called as each drill step begins.
func SetDrillStepHook(o *DrillOptions, f func(ctx context.Context, step string)) { o.onStep = f }

// SetDrillEtcdHook sets a hook called once the drill's etcd is started,
// with its pid and ports.
func SetDrillEtcdHook(o *DrillOptions, f func(pid int, ports []int)) { o.onEtcd = f }
