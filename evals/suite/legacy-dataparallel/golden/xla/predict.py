"""Classify MNIST test digits with weights exported by train.py (or a raw checkpoint)."""
import argparse

import torch
import torch_xla
from torchvision import datasets, transforms

from net import Net


def load_weights(path):
    state = torch.load(path, map_location="cpu")
    if "state_dict" in state:  # a training checkpoint rather than exported weights
        state = state["state_dict"]
    # checkpoints written while the model was wrapped in nn.DataParallel carry "module." prefixes
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", default="mnist_cnn.pt")
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()

    device = torch_xla.device()
    model = Net().to(device)
    model.load_state_dict(load_weights(args.weights))
    model.eval()

    test_set = datasets.MNIST("./data", train=False, download=True,
                              transform=transforms.Compose([
                                  transforms.ToTensor(),
                                  transforms.Normalize((0.1307,), (0.3081,))
                              ]))
    loader = torch.utils.data.DataLoader(test_set, batch_size=args.batch_size)
    correct = 0
    with torch.no_grad():
        for data, target in loader:
            pred = model(data.to(device)).argmax(dim=1)
            correct += (pred.cpu() == target).sum().item()
    print("Test accuracy: {:.2f}%".format(100.0 * correct / len(test_set)))


if __name__ == "__main__":
    main()
