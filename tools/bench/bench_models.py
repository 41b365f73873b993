"""The benchmarks' PyTorch models, the same networks as dtrain's specs: the example MLP and LeNet
(configs/fashion-mnist-*.yaml), the wide CNN of gpu_models/widecnn.yaml, and ResNet-20 of
configs/cifar10-resnet20.yaml. Used by train_torch.py (CPU) and gpu_torch.py (CUDA)."""
import torch
import torch.nn as nn


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
                             nn.Linear(500, 10))

    if name == "resnet20":
        return ResNet20()

    def block(cin, cout):  # as dtrain's spec: conv with relu, then batch norm
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(cout, momentum=0.1)]
    return nn.Sequential(*block(1, 64), nn.MaxPool2d(2), *block(64, 128), nn.MaxPool2d(2),
                         *block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


class Residual(nn.Module):
    """One block of configs/cifar10-resnet20.yaml: conv-bn-relu, conv-bn, plus the input (a 1x1
    strided conv with batch norm where the block halves the image), then relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout),
                                  nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout))
        self.proj = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride), nn.BatchNorm2d(cout))
                     if stride != 1 else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.proj(x))


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU()]
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for b in range(3):
                layers.append(Residual(cin, cout, stride if b == 0 else 1))
                cin = cout
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)
