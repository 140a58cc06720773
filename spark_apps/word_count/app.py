"""spark-submit entry point of word_count (lines -> words -> counts).

spark-submit spark_apps/word_count/app.py --spec spark_apps/word_count/word_count.yaml
"""

import sys
from pathlib import Path

from statekeeper.app.launcher import main

if __name__ == "__main__":
    sys.exit(main(default_spec=Path(__file__).with_name("word_count.yaml")))
