"""A printed architecture table against the built model (bnfl.experiments.architectures)."""

from torch import nn

from bnfl.experiments.architectures import architecture_check, flatten_width, layer_rows


def test_layer_rows_write_each_conv_and_fc_in_the_papers_notation():
    model = nn.Sequential(nn.Conv2d(3, 4, 5, 1, 2), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2, 2),
                          nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 10))
    assert layer_rows(model) == ["Conv2D(3, 4, 5, 1, 2); BN(4), ReLU, MaxPool2D(2, 2)", "AdaptiveAvgPool2D(2, 2)",
                                 "FC(16, 10)"]
    assert flatten_width(model, (3, 8, 8)) == 16


def test_architecture_check_marks_the_impossible_row_and_a_row_that_differs():
    printed = (("1", "Conv2D(3, 64, 5, 1, 2); BN(64), ReLU, MaxPool2D(2, 2)"),
               ("x", "Conv2D(1, 1, 1, 1, 1)"),  # the printed error, left out of the comparison
               ("2", "Conv2D(64, 64, 5, 1, 2); BN(64), ReLU, MaxPool2D(2, 2)"),
               ("3", "Conv2D(64, 128, 5, 1, 2); BN(128), ReLU"),
               ("4", "FC(6272, 2048); BN(2048), ReLU"),
               ("5", "FC(2048, 512); BN(512), ReLU"),
               ("6", "FC(512, 99)"))  # differs from the built FC(512, 10)
    out = architecture_check("digit_cnn", (3, 28, 28), printed, 1, params=14_219_210, affine=5_632, flat=(128, 7, 7),
                             source="counted", erratum="printed in error")
    assert [r["note"] for r in out["rows"]] == ["", "printed in error", "", "", "", "", "differs"]
    verdicts = {c.name: c.verdict for c in out["claims"]}
    assert verdicts == {"layers-match": "fail", "params": "pass", "flatten": "pass", "printed-row-is-an-error": "pass",
                        "bn-affine": "pass"}
    assert out["series"]["flatten"] == 6272 and "[counted]" in out["claims"][1].statement
