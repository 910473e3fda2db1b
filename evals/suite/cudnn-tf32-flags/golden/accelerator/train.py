import random

import numpy as np
import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
import torch.nn.functional as F


def set_seed(seed=0, deterministic=True):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        cudnn.deterministic = True
        cudnn.benchmark = False
    else:
        # let cuDNN pick the fastest conv algorithms for our fixed input size
        cudnn.benchmark = True


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def fake_mnist(n, num_classes=10):
    # blobs whose position depends on the class, so there is something to learn
    x = 0.3 * torch.randn(n, 1, 28, 28)
    y = torch.randint(0, num_classes, (n,))
    for i in range(n):
        r, c = divmod(int(y[i]), 5)
        x[i, 0, 4 + 10 * r : 12 + 10 * r, 2 + 5 * c : 7 + 5 * c] += 1.0
    return x, y


def main():
    set_seed(0)
    # TF32 is on by default for cuDNN convs but not for matmuls; turn both on explicitly
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    print(f"using {device}, cudnn {cudnn.version()}")

    x_train, y_train = fake_mnist(2048)
    model = SmallCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    batch_size = 64
    for epoch in range(3):
        model.train()
        perm = torch.randperm(len(x_train))
        for b, start in enumerate(range(0, len(x_train), batch_size)):
            idx = perm[start : start + batch_size]
            data, target = x_train[idx].to(device), y_train[idx].to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.cross_entropy(output, target)
            loss.backward()
            optimizer.step()
            if b % 10 == 0:
                print(f"epoch {epoch} batch {b:3d} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
