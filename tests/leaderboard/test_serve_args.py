"""`medhelm serve --suite S` (helm-server's spelling) opens the release `medhelm summarize --suite S` built."""

from medhelm.cli import build_parser


def test_serve_suite_is_the_release():
    args = build_parser("serve").parse_args(["serve", "--suite", "DEMO", "--output-path", "out"])
    assert args.release == "DEMO" and args.output_path is not None
    assert build_parser("serve").parse_args(["serve", "--release", "R"]).release == "R"
