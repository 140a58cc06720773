"""spark-submit entry point of word_count v2 (per word its count and first-seen time).

spark-submit spark_apps/word_count_v2/app.py --spec spark_apps/word_count_v2/word_count_v2.yaml
"""

import sys
from pathlib import Path

from statekeeper.app.launcher import main

if __name__ == "__main__":
    sys.exit(main(default_spec=Path(__file__).with_name("word_count_v2.yaml")))
