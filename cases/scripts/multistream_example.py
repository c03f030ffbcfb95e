import torch, os
import torch_npu
import torchair as tng
from torchair.configs.compiler_config import CompilerConfig
from torchair.core.utils import logger

# 定义模型model
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # 创建两个tag="66",tag="77"的event
        self.tagged_event1 = tng.ops.npu_create_tagged_event(tag="66")
        self.tagged_event2 = tng.ops.npu_create_tagged_event(tag="77")

    def forward(self, in1, in2, in3, in4):
        add_result = torch.add(in1, in2)
        # 插入一个event_record用于同步,对于self.tagged_event1.wait后的任务需要等record执行完毕才能执行
        tng.ops.npu_tagged_event_record(self.tagged_event1)
        with tng.scope.npu_stream_switch('1'):
            # torch.mm算子(mm_result)等待torch.add算子(add_result)执行完再执行
            tng.ops.npu_tagged_event_wait(self.tagged_event1)
            mm_result = torch.mm(in3, in4)
            # 插入一个event_record用于同步,对于self.tagged_event2.wait后的任务需要等record执行完毕才能执行
            tng.ops.npu_tagged_event_record(self.tagged_event2)
            B = in3 + in4
            # 调用npu_record_tagged_stream,表明Tensor B在stream'1'上使用,延长Tensor B对应内存的生命周期
            tng.ops.npu_record_tagged_stream(B, '1')
        mm1 = torch.mm(in3, in4)
        del B
        C = torch.ones(1000, 1000, dtype = torch.float16, device="npu")
        C.add_(2)
        with tng.scope.npu_stream_switch('2'):
            # torch.add算子(add2)等待torch.mm算子(mm_result)执行完再执行
            tng.ops.npu_tagged_event_wait(self.tagged_event2)
            add2 = torch.add(in3, in4)
        return add_result, mm_result, mm1, add2, C

model = Model()
config = CompilerConfig()
config.mode = "reduce-overhead"
npu_backend = tng.get_npu_backend(compiler_config=config)
# 使用torchair的backend去调用compile接口编译模型
model = torch.compile(model, backend=npu_backend, dynamic=False, fullgraph=True)
in1 = torch.randn(1000, 1000, dtype = torch.float16).npu()
in2 = torch.randn(1000, 1000, dtype = torch.float16).npu()
in3 = torch.randn(1000, 1000, dtype = torch.float16).npu()
in4 = torch.randn(1000, 1000, dtype = torch.float16).npu()
result = model(in1, in2, in3, in4)
print(f"Result:\n{result}\n")
