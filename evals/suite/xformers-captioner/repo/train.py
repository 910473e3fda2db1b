"""Train the captioner on synthetic images whose caption spells out their colour pattern."""
import argparse

import torch

from captioner import Captioner


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args()


def make_batch(generator, batch_size, vocab_size=48, caption_len=8):
    """Images of four coloured quadrants; the caption names each quadrant's colour, twice."""
    colours = torch.randint(0, 8, (batch_size, 4), generator=generator)
    palette = torch.linspace(-1, 1, 8)
    images = palette[colours].view(batch_size, 1, 2, 2).repeat_interleave(8, 2).repeat_interleave(8, 3)
    images = images.expand(-1, 3, -1, -1) + 0.1 * torch.randn(batch_size, 3, 16, 16, generator=generator)
    words = (colours + 1).repeat(1, 3)[:, : caption_len + 1]  # 0 is BOS
    words[:, 0] = 0
    return images, words[:, :-1], words[:, 1:]


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    model = Captioner().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    generator = torch.Generator().manual_seed(args.seed)

    for step in range(args.steps):
        images, tokens, targets = make_batch(generator, args.batch_size)
        images = images.cuda(non_blocking=True)
        tokens, targets = tokens.cuda(non_blocking=True), targets.cuda(non_blocking=True)
        loss = model(images, tokens, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            used = torch.cuda.memory_allocated() / 2**20
            print(f"step {step} loss {loss.item():.4f} | {used:.1f} MiB allocated")
    torch.cuda.empty_cache()
    torch.save(model.state_dict(), "captioner.pt")


if __name__ == "__main__":
    main()
