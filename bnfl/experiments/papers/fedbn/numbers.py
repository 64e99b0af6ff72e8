"""FedBN's reported numbers, verbatim, and the setup constants the paper states.

Li, Jiang, Zhang, Kamp, Dou, *FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization* (ICLR 2021; paper 004 in ``shared/papers``), CATALOG section 4. Strings are kept as
printed (``"63.0 (1.6)"`` = mean (std) over 5 runs); :mod:`bnfl.experiments.printed` reads them.
Learning rates are stripped from the provided text; the values below come from the reference
code (github.com/med-air/FedBN), as CATALOG §4.0 says.
"""

from __future__ import annotations

#: The digits benchmark's five clients, in the column order of Tables 11-16.
DIGITS: tuple[str, ...] = ("SVHN", "USPS", "SynthDigits", "MNIST-M", "MNIST")
OFFICE: tuple[str, ...] = ("Amazon", "Caltech", "DSLR", "Webcam")
DOMAINNET: tuple[str, ...] = ("Clipart", "Infograph", "Painting", "Quickdraw", "Real", "Sketch")
ABIDE: tuple[str, ...] = ("NYU", "USM", "UM", "UCLA")  # Table 1's column order

#: Table 1: test accuracy, mean (std) over 5 runs; columns Office-Caltech10 (A, C, D, W), DomainNet
#: (C, I, P, Q, R, S), ABIDE I (NYU, USM, UM, UCLA).
TABLE1_COLUMNS: tuple[str, ...] = ("A", "C", "D", "W", "C", "I", "P", "Q", "R", "S", "NYU", "USM", "UM", "UCLA")
TABLE1_GROUPS: tuple[tuple[str, int, int], ...] = (("Office", 0, 4), ("DomainNet", 4, 10), ("ABIDE", 10, 14))
TABLE1: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SingleSet", ("54.9 (1.5)", "40.2 (1.6)", "78.7 (1.3)", "86.4 (2.4)", "41.0 (0.9)", "23.8 (1.2)", "36.2 (2.7)",
                   "73.1 (0.9)", "48.5 (1.9)", "34.0 (1.1)", "58.0 (3.3)", "73.4 (2.2)", "64.3 (1.4)", "57.3 (2.4)")),
    ("FedAvg", ("54.1 (1.1)", "44.8 (1.0)", "66.9 (1.5)", "85.1 (2.9)", "48.8 (1.9)", "24.9 (0.7)", "36.5 (1.1)",
                "56.1 (1.6)", "46.3 (1.4)", "36.6 (2.5)", "62.7 (1.7)", "73.1 (2.4)", "70.7 (0.5)", "64.7 (0.7)")),
    ("FedProx", ("54.2 (2.5)", "44.5 (0.5)", "65.0 (3.6)", "84.4 (1.7)", "48.9 (0.8)", "24.9 (1.0)", "36.6 (1.8)",
                 "54.4 (3.1)", "47.8 (0.8)", "36.9 (2.1)", "63.3 (1.0)", "73.0 (1.8)", "70.5 (1.1)", "64.5 (1.2)")),
    ("FedBN", ("63.0 (1.6)", "45.3 (1.5)", "83.1 (2.5)", "90.5 (2.3)", "51.2 (1.4)", "26.8 (0.5)", "41.5 (1.4)",
               "71.3 (0.7)", "54.8 (0.8)", "42.1 (1.3)", "65.6 (1.1)", "75.1 (1.4)", "68.6 (2.9)", "65.5 (1.0)")),
)

#: Table 2 (App. A): the notation. The descriptions are as printed; the symbols are stripped from the
#: provided text and are [reconstructed] from the paper's equations (CATALOG §4.1).
#: (symbol [reconstructed], description as printed).
NOTATION: tuple[tuple[str, str], ...] = (
    ("x", "features,"),
    ("d", "dimension of"),
    ("y", "labels,"),
    ("P", "probability distribution"),
    ("N", "total number of clients"),
    ("T", "total number of epochs in training"),
    ("E", "number of local iteration in FL"),
    ("M", "number of training samples in each client"),
    ("[N]", "set of numbers,"),
    ("i", "indicator for client,"),
    ("j", "indicator for sample in each client,"),
    ("x_i^j", "the -th training sample in client"),
    ("m", "number of neurons in the first layer"),
    ("k", "indicator for neuron,"),
    ("v_k", "parameters for the -th neuron in the first layer"),
    ("||v||_S", "vector norm, , given a matrix"),
    ("S_i", "covariance matrix for features in client ,"),
    ("p, q", "indicator for sample,"),
    ("f", "two layer ReLU neural network with BN"),
    ("f*", "two layer ReLU neural network with BN with client-specified BN parameters"),
    ("V", "parameters of the first phase neurons,"),
    ("gamma", "the scaling parameter of BN"),
    ("c", "top layer parameters of the network"),
    ("sigma", "ReLU activation function,"),
    ("N(mu, Sigma)", "Gaussian with mean and covariance"),
    ("Unif{-1, 1}", "Rademacher distribution"),
    ("alpha^2", "variance of at initialization"),
    ("L", "empirical risk with square loss for network"),
    ("Lambda(t)", "evolution dynamic for FedAvg at epoch"),
    ("V(t)", "evolution dynamic with respect to for FedAvg at epoch"),
    ("G(t)", "evolution dynamic with respect to for FedAvg at epoch"),
    ("Lambda*(t)", "evolution dynamic for FedBN at epoch"),
    ("V*(t)", "evolution dynamic with respect to for FedBN at epoch"),
    ("G*(t)", "evolution dynamic with respect to for FedBN at epoch"),
    ("lambda_min(A)", "the minimal eigenvalue of matrix"),
    ("G^inf", "expectation of"),
    ("G*^inf", "expectation of"),
)

#: Table 3 (App. D.2): the digits CNN, as printed (layer 3 is printed twice; the reference code and
#: 6272 = 128 * 7 * 7 have one conv3: CATALOG §5.8).
TABLE3: tuple[tuple[str, str], ...] = (
    ("1", "Conv2D(3, 64, 5, 1, 2); BN(64), ReLU, MaxPool2D(2, 2)"),
    ("2", "Conv2D(64, 64, 5, 1, 2); BN(64), ReLU, MaxPool2D(2, 2)"),
    ("3", "Conv2D(64, 128, 5, 1, 2); BN(128), ReLU"),
    ("3", "Conv2D(64, 128, 5, 1, 2); BN(128), ReLU"),
    ("4", "FC(6272, 2048); BN(2048), ReLU"),
    ("5", "FC(2048, 512); BN(512), ReLU"),
    ("6", "FC(512, 10)"),
)
TABLE3_DUPLICATE_ROW = 3  # index of the printed duplicate (0-based)
#: Parameter counts of the digits CNN with a single conv3 [inferred in CATALOG §4.2].
DIGIT_CNN_PARAMS = 14_219_210
DIGIT_CNN_BN_AFFINE = 5_632

#: Table 4-8 (App. D.2): per-experiment client settings. (table, experiment, clients per dataset,
#: samples per client, local update epochs), as printed.
SETTINGS: tuple[tuple[str, str, str, str, str], ...] = (
    ("tab4", "(1) convergence rate", "1", "743", "1"),
    ("tab5", "(2) local update epochs", "1", "743", "1, 4, 8, 16"),
    ("tab6", "(3) local dataset size", "1", "100/60/40/20/10/5/1% of 7438", "1"),
    ("tab7", "(4) heterogeneity", "[1, 10]", "[1, 10]x743", "1"),
    ("tab8", "(5) state of the art", "1", "743", "1"),
)

#: Table 9 (App. D.3): AlexNet-BN for Office-Caltech10 / DomainNet, as printed (row 3 is spurious,
#: copied from Table 3; it breaks the 192 -> 384 channel chain: CATALOG §5.8).
TABLE9: tuple[tuple[str, str], ...] = (
    ("1", "Conv2D(3, 64, 11, 4, 2); BN(64), ReLU, MaxPool2D(3, 2)"),
    ("2", "Conv2D(64, 192, 5, 1, 2); BN(192), ReLU, MaxPool2D(3, 2)"),
    ("3", "Conv2D(64, 128, 5, 1, 2); BN(128), ReLU"),
    ("3", "Conv2D(192, 384, 3, 1, 1); BN(384), ReLU"),
    ("4", "Conv2D(384, 256, 3, 1, 1); BN(256), ReLU"),
    ("5", "Conv2D(256, 256, 3, 1, 1); BN(256), ReLU, MaxPool2D(3, 2)"),
    ("6", "AdaptiveAvgPool2D(6, 6)"),
    ("7", "FC(9216, 4096); BN(4096), ReLU"),
    ("8", "FC(4096, 4096); BN(4096), ReLU"),
    ("9", "FC(4096, 10)"),
)
TABLE9_SPURIOUS_ROW = 2
ALEXNET_BN_PARAMS = 57_063_498  # [inferred in CATALOG §4.2]

#: Table 10 (App. D.4): ABIDE I sites. Rows as printed; columns NYU, UM1, USM, UCLA1.
TABLE10_SITES: tuple[str, ...] = ("NYU", "UM1", "USM", "UCLA1")
TABLE10: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Total Subject", ("167", "88", "52", "63")),
    ("ASD Subject", ("73", "43", "33", "37")),
    ("HC Subject", ("94", "45", "19", "26")),
    ("ASD Percentage", ("44%", "49%", "63%", "59%")),
    ("fMRI Frames", ("176", "296", "236", "116")),
    ("Overlapping Trunc", ("145", "265", "205", "85")),
)
ABIDE_WINDOW = 32  # sliding window of 32 frames, stride 1 (Trunc = Frames - 32 + 1)

#: Table 11 (App. E.2): digits, 10%, E = 1, mean (std) over 5 seeds (the numbers of Fig. 5).
TABLE11: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Single", ("65.25 (1.07)", "95.16 (0.12)", "80.31 (0.38)", "77.77 (0.47)", "94.38 (0.07)")),
    ("FedAvg", ("62.86 (1.49)", "95.56 (0.27)", "82.27 (0.44)", "76.85 (0.54)", "95.87 (0.20)")),
    ("FedProx", ("63.08 (1.62)", "95.58 (0.31)", "82.34 (0.37)", "76.64 (0.55)", "95.75 (0.21)")),
    ("FedBN", ("71.04 (0.31)", "96.97 (0.32)", "83.19 (0.42)", "78.33 (0.66)", "96.57 (0.13)")),
)

#: Table 12 (App. E.3): FedBN vs centralized training (digits).
TABLE12: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Centralized", ("74.18 (0.44)", "96.46 (0.30)", "84.57 (0.38)", "79.65 (0.24)", "96.53 (0.19)")),
    ("FedBN", ("71.04 (0.31)", "96.97 (0.32)", "83.19 (0.42)", "78.33 (0.66)", "96.57 (0.13)")),
)

#: Table 13 (App. E.4): batch size B x local epochs E. ((B, E), method, five digits accuracies);
#: B = "inf" is full batch.
TABLE13: tuple[tuple[tuple[str, int], str, tuple[str, ...]], ...] = (
    (("10", 1), "FedAvg", ("65.50", "97.04", "84.25", "81.65", "96.55")),
    (("10", 1), "FedBN", ("76.18", "97.37", "86.51", "82.81", "97.41")),
    (("10", 4), "FedAvg", ("69.80", "96.67", "85.63", "82.54", "97.21")),
    (("10", 4), "FedBN", ("76.23", "97.04", "86.99", "83.14", "97.05")),
    (("10", 16), "FedAvg", ("65.05", "95.05", "83.74", "80.79", "96.71")),
    (("10", 16), "FedBN", ("75.56", "96.13", "84.78", "80.29", "96.44")),
    (("50", 1), "FedAvg", ("62.42", "95.32", "81.66", "75.28", "96.06")),
    (("50", 1), "FedBN", ("70.70", "97.04", "82.74", "78.38", "96.57")),
    (("50", 4), "FedAvg", ("61.67", "95.16", "80.69", "74.44", "95.71")),
    (("50", 4), "FedBN", ("69.85", "97.10", "81.78", "77.56", "96.40")),
    (("50", 16), "FedAvg", ("60.00", "94.68", "79.37", "73.39", "95.28")),
    (("50", 16), "FedBN", ("67.67", "96.94", "80.39", "76.54", "95.66")),
    (("inf", 1), "FedAvg", ("60.99", "94.57", "79.69", "74.36", "95.86")),
    (("inf", 1), "FedBN", ("65.98", "96.29", "79.75", "76.79", "96.15")),
    (("inf", 4), "FedAvg", ("59.07", "95.38", "79.88", "73.97", "94.51")),
    (("inf", 4), "FedBN", ("65.25", "96.34", "79.99", "73.96", "95.51")),
    (("inf", 16), "FedAvg", ("61.88", "94.68", "78.69", "74.36", "95.46")),
    (("inf", 16), "FedBN", ("64.39", "95.16", "78.22", "73.96", "95.57")),
)

#: Table 14 (App. E.5): local dataset size as % of 7438. Columns 100, 60, 40, 20, 10, 5, 1 %.
TABLE14_FRACTIONS: tuple[int, ...] = (100, 60, 40, 20, 10, 5, 1)
TABLE14: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("MNIST", "SingleSet", ("98.09", "97.84", "97.22", "96.14", "94.35", "90.86", "75.28")),
    ("MNIST", "FedAvg", ("98.96", "98.54", "98.13", "97.51", "96.22", "93.79", "79.94")),
    ("MNIST", "FedBN", ("98.91", "98.63", "98.34", "97.78", "96.72", "94.67", "85.22")),
    ("SVHN", "SingleSet", ("85.74", "84.62", "82.75", "76.42", "66.81", "52.62", "12.06")),
    ("SVHN", "FedAvg", ("82.08", "79.56", "77.37", "70.84", "63.80", "49.15", "23.67")),
    ("SVHN", "FedBN", ("86.93", "84.72", "82.87", "78.20", "71.31", "61.53", "31.98")),
    ("USPS", "SingleSet", ("98.87", "98.49", "97.85", "96.94", "95.11", "93.01", "80.11")),
    ("USPS", "FedAvg", ("98.33", "97.85", "97.42", "96.61", "95.59", "93.76", "79.09")),
    ("USPS", "FedBN", ("98.82", "98.92", "98.55", "98.17", "97.58", "96.24", "85.05")),
    ("Synth", "SingleSet", ("94.33", "92.82", "91.02", "86.77", "80.47", "70.61", "14.10")),
    ("Synth", "FedAvg", ("93.98", "92.57", "91.04", "87.03", "82.17", "72.76", "42.11")),
    ("Synth", "FedBN", ("94.40", "92.81", "91.75", "88.03", "83.06", "74.85", "43.76")),
    ("MNISTM", "SingleSet", ("93.30", "91.63", "89.41", "84.34", "77.59", "66.02", "17.23")),
    ("MNISTM", "FedAvg", ("90.59", "88.91", "86.21", "82.11", "76.93", "67.97", "41.71")),
    ("MNISTM", "FedBN", ("91.35", "89.95", "87.79", "83.73", "78.80", "70.04", "44.17")),
)

#: Table 15 (App. E.6): unequal dataset sizes, 10% of each original dataset (clients with fewer
#: samples re-sample so every client runs the same number of local iterations).
TABLE15_SAMPLES: tuple[str, ...] = ("7943", "743", "39116", "5600", "5600")
TABLE15: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("FedAvg", ("87.00", "98.01", "97.55", "88.69", "98.75")),
    ("FedProx", ("86.75", "97.90", "97.53", "88.86", "98.86")),
    ("FedBN", ("89.34", "98.28", "97.83", "90.34", "98.89")),
)
#: Table 16 (App. E.6): unequal sizes, full original datasets (implausible under its header:
#: CATALOG §5.8 suspects permuted columns).
TABLE16_SAMPLES: tuple[str, ...] = ("79430", "7430", "391160", "56000", "56000")
TABLE16: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("FedAvg", ("99.59", "92.27", "98.71", "99.30", "95.27")),
    ("FedProx", ("99.50", "92.12", "98.66", "99.27", "95.44")),
    ("FedBN", ("99.62", "94.34", "98.92", "99.54", "96.72")),
)
#: The reference code's client order, which Table 16's values fit (CATALOG §5.8).
REFERENCE_CODE_ORDER: tuple[str, ...] = ("MNIST", "SVHN", "USPS", "SynthDigits", "MNIST-M")

#: Table 17 (App. G): unseen-domain clients (Morpho-MNIST). The FedAvg row is the table's last line
#: in the paper's text (CATALOG §5.8 lists it as missing: the catalog's copy of the table ends early).
TABLE17_COLUMNS: tuple[str, ...] = ("Morpho-global", "Morpho-local")
TABLE17: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("FedBN", ("92.45", "94.61")),
    ("FedProx", ("92.35", "94.31")),
    ("FedAvg", ("91.28", "93.55")),
)

# -- setup constants (Sec. 5, App. D; lr and mu from the reference code) --------------------------
DIGITS_TRAIN = 7438  # each digits dataset truncated to this many training samples
DIGITS_DEFAULT_FRACTION = 0.10  # the default client holds 10% = 743 samples
DIGITS_DEFAULT_SAMPLES = 743
DIGITS_SIZE = 28  # images resized to 28x28x3, Normalize(0.5, 0.5)
BATCH = 32
LR = 1e-2  # [stripped in the text; the reference code's default]
LOCAL_EPOCHS = 1
EPOCHS_TEXT = 300  # "training epochs 300" (text)
ROUNDS_CODE = 100  # the reference code's default: 100 rounds x 1 local epoch (CATALOG §5.8)
FEDPROX_MU = 1e-2  # the reference code's default ("best value from grid search" in the text)
SEEDS = 5  # "5 trials with different seeds"
E_GRID = (1, 4, 8, 16)  # Fig. 4(a) / Table 5
B_GRID = ("10", "50", "inf")  # Table 13
E_GRID_TAB13 = (1, 4, 16)
HETEROGENEITY_CLIENTS = tuple(range(1, 11))  # Fig. 4(c) / Table 7: 1..10 clients per dataset
OFFICE_TRAIN = 62  # training samples per Office-Caltech10 client
DOMAINNET_TRAIN = 105  # per DomainNet client (top-10 classes)
ABIDE_INPUT = 5995  # connectome vector length
ABIDE_HIDDEN = (16, 16)
ABIDE_BATCH = 100
ABIDE_EPOCHS = 50
