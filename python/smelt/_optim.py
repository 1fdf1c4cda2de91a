"""The updates of torch.optim's SGD, Adam and AdamW, as smelt traces them.

These functions are never run by Python: when compiled code calls the
step() of one of those optimizers, the tracer (tracer/optim.c) reads the
optimizer's groups, gradients and state from their sources, guards them,
and inlines the matching function below over them, with grad mode off (as
the step runs). Every tensor update is in place, so the compiled graph
writes the new parameters and state back into the optimizer's own tensors:
one fused pass per parameter instead of eager's chain of kernels.

The arithmetic follows torch's single-tensor implementations operation by
operation, so the results match eager's. A float learning rate arrives as
a 0-d float64 tensor (a graph input: a scheduler's new rate is not a new
compile), cast to the parameter's dtype where it is used, as eager casts
the Python float. The step counters stay tensors:
the bias corrections are computed from them in float64 inside the graph
(eager computes them in Python floats from step.item()), so a new step
count is not a new compile.
"""
import torch


def sgd(params, grads, bufs, lr, weight_decay, momentum, dampening, nesterov, maximize):
    for i in range(len(params)):
        p = params[i]
        g = grads[i] if not maximize else -grads[i]
        if weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        if momentum != 0:
            buf = bufs[i]
            buf.mul_(momentum).add_(g, alpha=1 - dampening)
            if nesterov:
                g = g.add(buf, alpha=momentum)
            else:
                g = buf
        p.sub_(g * lr)   # lr: a 0-d float64 tensor (a graph input) or a number


def adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad, beta1, beta2, lr, weight_decay,
         eps, maximize, decoupled):
    for i in range(len(params)):
        p = params[i]
        g = grads[i] if not maximize else -grads[i]
        exp_avg = exp_avgs[i]
        exp_avg_sq = exp_avg_sqs[i]
        step_t = steps[i]
        step_t.add_(1)
        if weight_decay != 0:
            if decoupled:
                p.mul_(1 - lr * weight_decay)
            else:
                g = g.add(p, alpha=weight_decay)
        exp_avg.lerp_(g, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        step = step_t.double()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        neg_step_size = -(lr / bias_correction1)
        bias_correction2_sqrt = bias_correction2.sqrt()
        if amsgrad:
            mx = max_exp_avg_sqs[i]
            mx.copy_(torch.maximum(mx, exp_avg_sq))
            denom = (mx.sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        # addcdiv_(exp_avg, denom, value=v) computes p + v * exp_avg / denom
        p.add_(neg_step_size * exp_avg / denom)
