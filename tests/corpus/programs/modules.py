"""nn.Module programs: container subclasses overriding __getitem__/__len__/
__iter__/__contains__, ModuleList/ModuleDict/Sequential indexing and
slicing, parameters()/named_modules()/children() iteration, train/eval
switching, buffers mutated by forward, attributes changed between calls,
submodules swapped, modules passed as arguments."""
import collections

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..base import T, call, do, mod, seta

C = "modules"


def _train(ctx):
    ctx.subject.train()


def _eval(ctx):
    ctx.subject.eval()


class Stack(nn.Module):
    """A container with its own __getitem__/__len__/__iter__/__contains__."""

    def __init__(self, n, d):
        super().__init__()
        self.items = nn.ModuleList(nn.Linear(d, d) for _ in range(n))

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(reversed(self.items))

    def __contains__(self, name):
        return name in ("first", "last")


class UsesGetitem(nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = Stack(3, 6)

    def forward(self, x):
        return self.stack[0](x) + self.stack[-1](x) * len(self.stack)


class UsesIter(nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = Stack(3, 6)

    def forward(self, x):
        for layer in self.stack:
            x = torch.tanh(layer(x))
        return x


class UsesContains(nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = Stack(2, 6)

    def forward(self, x):
        return x * 2 if "first" in self.stack else x


class MySequential(nn.Sequential):
    def forward(self, x):
        for i, m in enumerate(self):
            x = m(x) if i % 2 == 0 else m(x) + x
        return x


class ListIndexing(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(6, 6) for _ in range(4)])

    def forward(self, x):
        x = self.layers[0](x)
        for layer in self.layers[1:3]:
            x = layer(x).relu()
        return self.layers[-1](x), len(self.layers)


class ListReversedZip(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.ModuleList([nn.Linear(6, 6) for _ in range(2)])
        self.b = nn.ModuleList([nn.LayerNorm(6) for _ in range(2)])

    def forward(self, x):
        for lin, norm in zip(reversed(self.a), self.b):
            x = norm(lin(x))
        return x


class DictModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"cls": nn.Linear(6, 3), "reg": nn.Linear(6, 1)})

    def forward(self, x):
        return {k: h(x) for k, h in self.heads.items()}


class DictModulesKeyed(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(6, 6), "b": nn.Linear(6, 6)})
        self.use = "a"

    def forward(self, x):
        return self.heads[self.use](x) + ("b" in self.heads)


class ParamIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 6), nn.Linear(6, 6)

    def forward(self, x):
        reg = sum(p.pow(2).sum() for p in self.parameters())
        n = len(list(self.named_parameters()))
        return self.fc2(self.fc1(x)) + reg * 0.01, n


class NamedModulesIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))

    def forward(self, x):
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                x = m(x)
        return x


class ChildrenIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Tanh()

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x, [type(m).__name__ for m in self.children()]


class BuffersIteration(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("m1", torch.randn(6))
        self.register_buffer("m2", torch.randn(6))

    def forward(self, x):
        for name, b in self.named_buffers():
            x = x + b
        return x


class TrainEvalBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            return y * 2
        return y - 1


class BufferCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("running", torch.zeros(6))

    def forward(self, x):
        self.calls += 1
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return self.fc(x) + self.calls


class PyAttrCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.n = 0

    def forward(self, x):
        self.n += 1
        return self.fc(x) * self.n


class ScaleAttr(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.scale = 1.0
        self.act = "relu"

    def forward(self, x):
        y = self.fc(x) * self.scale
        return torch.relu(y) if self.act == "relu" else torch.sigmoid(y)


class SwapSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.act(self.fc(x))


class OptionalSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.norm = None

    def forward(self, x):
        x = self.fc(x)
        if self.norm is not None:
            x = self.norm(x)
        return x


class ParamReplaced(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 6))

    def forward(self, x):
        return x @ self.w


class ModuleArg(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, extra):
        return extra(self.fc(x))


class SharedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.again = self.fc

    def forward(self, x):
        return self.again(self.fc(x))


class Recursive(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.child = Recursive(depth - 1) if depth > 0 else None

    def forward(self, x):
        x = torch.relu(self.fc(x))
        return self.child(x) if self.child is not None else x


class GetattrModule(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(3):
            setattr(self, f"layer{i}", nn.Linear(6, 6))

    def forward(self, x):
        for i in range(3):
            x = getattr(self, f"layer{i}")(x)
        return x


class PropertyModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    @property
    def weight_norm(self):
        return self.fc.weight.norm()

    def forward(self, x):
        return self.fc(x) / self.weight_norm


class SuperForward(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def act(self, x):
        return torch.relu(x)

    def forward(self, x):
        return self.act(self.fc(x))


class Derived(Base):
    def act(self, x):
        return torch.tanh(x) * 3


class StaticAndClassMethods(nn.Module):
    k = 2.0

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    @staticmethod
    def twice(t):
        return t * 2

    @classmethod
    def scaled(cls, t):
        return t * cls.k

    def forward(self, x):
        return self.scaled(self.twice(self.fc(x)))


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x, *, scale=1.0, mask=None, **extra):
        y = self.fc(x) * scale
        if mask is not None:
            y = y.masked_fill(mask, 0.0)
        return y + len(extra)


class ParameterListDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.pl = nn.ParameterList([nn.Parameter(torch.randn(6)) for _ in range(3)])
        self.pd = nn.ParameterDict({"a": nn.Parameter(torch.randn(6))})

    def forward(self, x):
        for p in self.pl:
            x = x * p
        return x + self.pd["a"]


class BatchNormTrainEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(6)
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.bn(self.fc(x))


class DropoutTrainEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


class ApplyInit(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        return self.fc(x), self.fc.weight.shape, self.fc.in_features


class ModuleStateDictRead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        sd = self.state_dict()
        return x @ sd["fc.weight"].t() + sd["fc.bias"]


class ListOfModulesPlain(nn.Module):
    """A plain Python list of modules (not registered)."""

    def __init__(self):
        super().__init__()
        self.plain = [nn.Linear(6, 6), nn.Linear(6, 6)]

    def forward(self, x):
        for m in self.plain:
            x = m(x)
        return x


class ForwardCallsMethodByName(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.how = "up"

    def up(self, x):
        return x * 10

    def down(self, x):
        return x / 10

    def forward(self, x):
        return getattr(self, self.how)(self.fc(x))


@mod(C, inputs=(T(2, 6),))
def container_getitem_len():
    return UsesGetitem()


@mod(C, inputs=(T(2, 6),))
def container_iter_override():
    return UsesIter()


@mod(C, inputs=(T(2, 6),))
def container_contains_override():
    return UsesContains()


@mod(C, inputs=(T(2, 6),))
def sequential_subclass_forward():
    return MySequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh())


@mod(C, inputs=(T(2, 6),))
def sequential_plain():
    return nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 6), nn.LayerNorm(6))


@mod(C, inputs=(T(2, 6),))
def sequential_ordered_dict():
    return nn.Sequential(collections.OrderedDict(a=nn.Linear(6, 6), b=nn.SiLU()))


class SeqSlice(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(*[nn.Linear(6, 6) for _ in range(4)])

    def forward(self, x):
        return self.seq[1:3](x) + self.seq[-1](x) + self.seq[:1](x)


@mod(C, inputs=(T(2, 6),))
def sequential_slicing():
    return SeqSlice()


@mod(C, inputs=(T(2, 6),))
def module_list_index_slice():
    return ListIndexing()


@mod(C, inputs=(T(2, 6),))
def module_list_reversed_zip():
    return ListReversedZip()


@mod(C, inputs=(T(2, 6),))
def module_dict_items():
    return DictModules()


@mod(C, inputs=(T(2, 6),), steps=[call(), seta("use", "b"), call()])
def module_dict_key_attr_changes():
    return DictModulesKeyed()


@mod(C, inputs=(T(2, 6),))
def parameters_iteration():
    return ParamIteration()


@mod(C, inputs=(T(2, 6),))
def named_modules_iteration():
    return NamedModulesIteration()


@mod(C, inputs=(T(2, 6),))
def children_iteration():
    return ChildrenIteration()


@mod(C, inputs=(T(2, 6),))
def named_buffers_iteration():
    return BuffersIteration()


@mod(C, inputs=(T(2, 6),), steps=[call(), do(_train), call(), do(_eval), call()])
def train_eval_switch():
    return TrainEvalBranch().eval()


@mod(C, inputs=(T(4, 6),), steps=[call(), call(), call()])
def buffers_mutated_by_forward():
    return BufferCounter()


@mod(C, inputs=(T(4, 6),), steps=[call(), call(), call()], state=("self.n",))
def python_attribute_counter():
    return PyAttrCounter()


@mod(C, inputs=(T(2, 6),), steps=[call(), seta("scale", 3.0), call(), seta("act", "sigmoid"), call()])
def attributes_changed_between_calls():
    return ScaleAttr()


@mod(C, inputs=(T(2, 6),), steps=[call(), seta("act", nn.Tanh()), call(), seta("act", nn.Identity()), call()])
def submodule_swapped():
    return SwapSubmodule()


@mod(C, inputs=(T(2, 6),), steps=[call(), seta("norm", nn.LayerNorm(6)), call()])
def optional_submodule_added():
    return OptionalSubmodule()


@mod(C, inputs=(T(2, 6),), steps=[call(), seta("w", nn.Parameter(torch.eye(6) * 3)), call()])
def parameter_replaced():
    return ParamReplaced()


@mod(C, inputs=(T(2, 6),), steps=[call(), do(lambda ctx: ctx.subject.w.data.mul_(-1)), call()])
def parameter_data_changed_in_place():
    return ParamReplaced()


@mod(C, inputs=(T(2, 6), nn.ReLU()), steps=[call(), call(T(2, 6), nn.Tanh()), call(T(2, 6), nn.ReLU())])
def module_passed_as_argument():
    return ModuleArg()


@mod(C, inputs=(T(2, 6),))
def shared_submodule():
    return SharedLayer()


@mod(C, inputs=(T(2, 6),))
def recursive_module():
    return Recursive(3)


@mod(C, inputs=(T(2, 6),))
def getattr_layers():
    return GetattrModule()


@mod(C, inputs=(T(2, 6),))
def property_in_forward():
    return PropertyModule()


@mod(C, inputs=(T(2, 6),))
def super_forward():
    return SuperForward(6, 6)


@mod(C, inputs=(T(2, 6),))
def overridden_method():
    return Derived()


@mod(C, inputs=(T(2, 6),))
def static_and_class_methods():
    return StaticAndClassMethods()


@mod(C, inputs=(T(2, 6),), kwargs={"scale": 2.0, "extra1": 1, "extra2": "x"})
def kwargs_forward():
    return KwargsForward()


@mod(C, inputs=(T(2, 6),))
def parameter_list_dict():
    return ParameterListDict()


@mod(C, inputs=(T(4, 6),), steps=[call(), do(_train), call(), call(), do(_eval), call()])
def batchnorm_train_eval():
    return BatchNormTrainEval().eval()


@mod(C, inputs=(T(4, 6),), steps=[call(), do(_train), call(), do(_eval), call()])
def dropout_train_eval():
    return DropoutTrainEval().eval()


@mod(C, inputs=(T(2, 6),))
def module_attrs_in_result():
    return ApplyInit()


@mod(C, inputs=(T(2, 6),))
def state_dict_in_forward():
    return ModuleStateDictRead()


@mod(C, inputs=(T(2, 6),))
def plain_list_of_modules():
    return ListOfModulesPlain()


@mod(C, inputs=(T(2, 6),), steps=[call(), seta("how", "down"), call()])
def method_by_name_attr():
    return ForwardCallsMethodByName()


@mod(C, inputs=(T(2, 3, 8, 8),))
def cnn_block():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64, 5)).eval()


@mod(C, inputs=(T(2, 5, 8),))
def transformer_encoder_layer():
    return nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()


@mod(C, inputs=(T(2, 5, 8),))
def multihead_attention():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.att = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            return self.att(x, x, x, need_weights=False)[0]
    return M().eval()


@mod(C, inputs=(T(3, 4, 6),))
def lstm_layer():
    return nn.LSTM(6, 5, batch_first=True)


@mod(C, inputs=(T(3, 6),))
def embedding_bag_like():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)

        def forward(self, x):
            idx = (x.abs() * 3).long().clamp(0, 9)
            return self.emb(idx).sum(1)
    return M()


@mod(C, inputs=(T(2, 6),), steps=[call(), do(lambda ctx: ctx.subject.fc.requires_grad_(False)), call()])
def requires_grad_toggled_on_params():
    return SwapSubmodule()


@mod(C, inputs=(T(2, 6),), steps=[call(), do(lambda ctx: ctx.subject.to(torch.float64)), call(T(2, 6, dtype=torch.float64))])
def module_converted_to_double():
    return nn.Sequential(nn.Linear(6, 6), nn.Tanh())


@mod(C, inputs=(T(2, 6),), steps=[call(), do(lambda ctx: ctx.subject.load_state_dict(
    {k: v * 0.5 for k, v in ctx.subject.state_dict().items()})), call()])
def load_state_dict_between_calls():
    return nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))


class FunctionalCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 6))
        self.b = nn.Parameter(torch.randn(6))

    def forward(self, x):
        return F.linear(x, self.w, self.b).softmax(-1)


@mod(C, inputs=(T(2, 6),))
def functional_with_params():
    return FunctionalCall()
