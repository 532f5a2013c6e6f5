package drill

import "context"

// SetStepHook sets a hook called as each drill step begins.
func SetStepHook(o *Options, f func(ctx context.Context, step string)) { o.onStep = f }

// SetEtcdHook sets a hook called once the drill's etcd is started, with
// its pid and ports.
func SetEtcdHook(o *Options, f func(pid int, ports []int)) { o.onEtcd = f }
