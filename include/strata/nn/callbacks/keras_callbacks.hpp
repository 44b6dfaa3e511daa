#pragma once
//! The Keras callbacks, all of them: EarlyStopping, ModelCheckpoint,
//! CSVLogger, ReduceLROnPlateau, LearningRateScheduler, TerminateOnNaN
//! (TensorBoard: nn/callbacks/tensorboard.hpp; BackupAndRestore: nn/callbacks/backup_and_restore.hpp).
//!   #include <strata/nn/callbacks/keras_callbacks.hpp>

#include <strata/nn/callbacks/csv_logger.hpp>
#include <strata/nn/callbacks/early_stopping.hpp>
#include <strata/nn/callbacks/lr_callbacks.hpp>
#include <strata/nn/callbacks/model_checkpoint.hpp>
#include <strata/nn/callbacks/terminate_on_nan.hpp>
