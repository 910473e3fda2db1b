import torch
import torch.nn.functional as F


def train_one_epoch(model, loader, optimizer):
    model.train()
    total = torch.zeros(())
    for points, labels in loader:
        loss = F.cross_entropy(model(points), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.detach() * labels.numel()
    return total / len(loader.dataset)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss_sum = torch.zeros(())
    correct = torch.zeros((), dtype=torch.long)
    for points, labels in loader:
        logits = model(points)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum")
        correct += (logits.argmax(dim=1) == labels).sum()
    n = len(loader.dataset)
    return loss_sum / n, correct.float() / n
