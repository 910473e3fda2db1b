"""Score sensor readings for anomalies with a small autoencoder, on the CPU.

    python score.py --csv data/sensors.csv --weights weights.json --threshold 8.0
"""
import argparse
import csv
import json
import statistics
import sys

import torch

from model import FEATURES, SensorAutoencoder, load_json_weights


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["timestamp"] for r in rows], [[float(r[c]) for c in FEATURES] for r in rows]


def standardise(values):
    columns = list(zip(*values))
    means = [statistics.fmean(c) for c in columns]
    stdevs = [statistics.stdev(c) or 1.0 for c in columns]
    return [[(v - m) / s for v, m, s in zip(row, means, stdevs)] for row in values]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv", default="data/sensors.csv")
    parser.add_argument("--weights", default="weights.json")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threshold", type=float, default=8.0, help="in robust z-scores of the error")
    args = parser.parse_args()

    torch.set_num_threads(1)
    model = load_json_weights(SensorAutoencoder(), args.weights).eval()
    stamps, values = read_rows(args.csv)
    x = torch.tensor(standardise(values), dtype=torch.float32)

    errors = []
    with torch.inference_mode():
        for batch in torch.split(x, args.batch_size):
            recon = model(batch)
            errors.extend(((recon - batch) ** 2).mean(dim=1).tolist())

    median = statistics.median(errors)
    mad = statistics.median(abs(e - median) for e in errors) or 1e-12
    flagged = [
        {"timestamp": t, "error": round(e, 5), "z": round((e - median) / (1.4826 * mad), 2)}
        for t, e in zip(stamps, errors)
        if (e - median) / (1.4826 * mad) > args.threshold
    ]
    json.dump({"rows": len(errors), "median_error": round(median, 5), "anomalies": flagged}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
